# SPDX-License-Identifier: Apache-2.0
# Decode throughput per weight format (GPT-2 124M, random weights) beside the bandwidth roofline.
add_executable(bench_decode_formats ${CMAKE_CURRENT_LIST_DIR}/decode_formats.cpp)
target_link_libraries(bench_decode_formats PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
# One host linear at a time, per shape, format and row count, beside bandwidth and FMA peak.
add_executable(bench_host_linear ${CMAKE_CURRENT_LIST_DIR}/host_linear.cpp)
target_link_libraries(bench_host_linear PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
