# SPDX-License-Identifier: Apache-2.0
add_executable(bench_speculative ${CMAKE_CURRENT_LIST_DIR}/speculative.cpp)
target_link_libraries(bench_speculative PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
# The same on the Cuda backend (nvcc; built wherever nvcc is, run by scripts/gpu_check.sh on a GPU).
if(SERVEKIT_HAVE_CUDA)
  add_executable(bench_speculative_cuda ${CMAKE_CURRENT_LIST_DIR}/speculative_cuda.cu)
  servekit_cuda_program(bench_speculative_cuda)
  target_link_libraries(bench_speculative_cuda PRIVATE CLI11::CLI11)
endif()
# A draft model against plain decoding and n-gram lookup (host).
add_executable(bench_speculative_draft ${CMAKE_CURRENT_LIST_DIR}/speculative_draft.cpp)
target_link_libraries(bench_speculative_draft PRIVATE servekit::servekit servekit_warnings
  CLI11::CLI11)
