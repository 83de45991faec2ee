# SPDX-License-Identifier: Apache-2.0
# simt_micro: costs of the emulator's primitives (fiber switch, barrier, shuffle, launch, SGEMM).
if(NOT TARGET servekit_simt)  # the Emulated backend needs boost.context + CUDA headers
  return()
endif()
add_executable(simt_micro ${CMAKE_CURRENT_SOURCE_DIR}/simt_micro.cpp)
target_link_libraries(simt_micro PRIVATE servekit_simt servekit_warnings)
