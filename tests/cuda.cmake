# SPDX-License-Identifier: Apache-2.0
# The decoder with device-resident weights, scratch and KV caches. test_gpt2_device_storage:
# that code path built by the host compiler and run by the emulator (label `emulated`).
# test_gpt2_cuda: the same checks on backend::Cuda, compiled by nvcc for sm_80 and sm_90
# whenever nvcc is found (so CI compiles it), registered as a test (label `cuda`) only when a
# GPU is present at configure time.
if(NOT TARGET servekit_simt)
  return()
endif()

servekit_test(test_gpt2_device_storage LABELS emulated
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt2_device_storage.cpp LIBS servekit_simt)
# GPT-2 small's decode linears, launched dry: each fills an H100 at batch 1.
servekit_test(test_decode_grid LABELS emulated
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_decode_grid.cpp LIBS servekit_simt)

if(NOT SERVEKIT_HAVE_CUDA)
  return()
endif()

add_executable(test_gpt2_cuda ${CMAKE_CURRENT_LIST_DIR}/test_gpt2_cuda.cu
  $<TARGET_OBJECTS:servekit_catch_main>)
target_link_libraries(test_gpt2_cuda PRIVATE servekit::servekit servekit_cuda_flags
  Catch2::Catch2)
set_target_properties(test_gpt2_cuda PROPERTIES CUDA_ARCHITECTURES "80;90")
target_compile_definitions(test_gpt2_cuda PRIVATE
  SERVEKIT_FIXTURES="${SERVEKIT_FIXTURES}" SERVEKIT_DATA="${SERVEKIT_DATA}")

execute_process(COMMAND nvidia-smi -L RESULT_VARIABLE servekit_smi_rc OUTPUT_VARIABLE servekit_gpus
  ERROR_QUIET)
if(servekit_smi_rc EQUAL 0 AND servekit_gpus MATCHES "GPU")
  add_test(NAME test_gpt2_cuda COMMAND test_gpt2_cuda)
  set_tests_properties(test_gpt2_cuda PROPERTIES LABELS cuda)
else()
  message(STATUS "servekit: no GPU found; test_gpt2_cuda is built but not registered")
endif()
