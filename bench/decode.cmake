# SPDX-License-Identifier: Apache-2.0
add_executable(bench_decode_host ${CMAKE_CURRENT_LIST_DIR}/decode_host.cpp)
target_link_libraries(bench_decode_host PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
# The same benchmark with the kernels' loops on OpenMP instead of servekit's pool: the baseline
# of bench/shared_machine.py (decode beside a competing process).
add_executable(bench_decode_host_openmp ${CMAKE_CURRENT_LIST_DIR}/decode_host.cpp)
target_link_libraries(bench_decode_host_openmp PRIVATE servekit::servekit servekit_warnings
  CLI11::CLI11)
target_compile_definitions(bench_decode_host_openmp PRIVATE SERVEKIT_OPENMP_LOOPS)
# The Cuda backend's decode (nvcc; built wherever nvcc is, run by scripts/gpu_check.sh on a GPU).
if(SERVEKIT_HAVE_CUDA)
  add_executable(bench_decode_cuda ${CMAKE_CURRENT_LIST_DIR}/decode_cuda.cu)
  servekit_cuda_program(bench_decode_cuda)
  target_link_libraries(bench_decode_cuda PRIVATE CLI11::CLI11)
endif()
# Decode over a long context with the KV cache in fp32, f16 and int8.
add_executable(bench_kv_formats ${CMAKE_CURRENT_LIST_DIR}/kv_formats.cpp)
target_link_libraries(bench_kv_formats PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
