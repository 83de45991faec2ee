# SPDX-License-Identifier: Apache-2.0
# simt_micro: costs of the emulator's primitives (fiber switch, barrier, shuffle, launch, SGEMM).
if(NOT TARGET servekit_simt)  # the Emulated backend needs boost.context + CUDA headers
  return()
endif()
add_executable(simt_micro ${CMAKE_CURRENT_SOURCE_DIR}/simt_micro.cpp)
target_link_libraries(simt_micro PRIVATE servekit_simt servekit_warnings)
# The Cuda backend's decode step for GPT-2 124M, listed dry: launches, grids vs an H100's SMs,
# the bytes a step must move and the time floor they set.
add_executable(bench_decode_launches ${CMAKE_CURRENT_SOURCE_DIR}/decode_launches.cpp)
target_link_libraries(bench_decode_launches PRIVATE servekit_simt servekit_warnings CLI11::CLI11)
