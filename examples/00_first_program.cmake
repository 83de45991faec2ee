# SPDX-License-Identifier: Apache-2.0
# The program of docs/first_program.md: compiled with the rest, so the page cannot go stale.
add_executable(00_first_program ${CMAKE_CURRENT_LIST_DIR}/00_first_program/main.cpp)
target_link_libraries(00_first_program PRIVATE servekit::servekit servekit_warnings)
