# SPDX-License-Identifier: Apache-2.0
add_executable(bench_lora ${CMAKE_CURRENT_LIST_DIR}/lora.cpp)
target_link_libraries(bench_lora PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
# The same on the Cuda backend (nvcc; built wherever nvcc is, run by scripts/gpu_check.sh on a GPU).
if(SERVEKIT_HAVE_CUDA)
  add_executable(bench_lora_cuda ${CMAKE_CURRENT_LIST_DIR}/lora_cuda.cu)
  servekit_cuda_program(bench_lora_cuda)
  target_link_libraries(bench_lora_cuda PRIVATE CLI11::CLI11)
endif()
# Where a LoRA step's time goes: the shrink's and the expand's cost beside their bytes.
add_executable(bench_lora_linears ${CMAKE_CURRENT_LIST_DIR}/lora_linears.cpp)
target_link_libraries(bench_lora_linears PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
