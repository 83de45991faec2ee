# SPDX-License-Identifier: Apache-2.0
# servekit's half of bench/grammar/peers.py (the grammar engines side by side).
add_executable(bench_grammar_masks ${CMAKE_CURRENT_LIST_DIR}/grammar_masks.cpp)
target_link_libraries(bench_grammar_masks PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
