# SPDX-License-Identifier: Apache-2.0
# The device tests. test_gpt2_device_storage: the decoder's device-storage code path built by the
# host compiler and run by the emulator (label `emulated`); test_decode_grid: GPT-2 small's
# decode launches, dry. With nvcc, the same sources for a GPU: test_gpt2_cuda (the decoder on
# backend::Cuda), test_invariants_cuda (the serving invariants on backend::Cuda),
# test_kernels_cuda (kernel tests against the host reference), test_engine_cuda (the engine's
# tests of test_engine_emulated and test_constrain_emulated) and test_simt_cuda (the simt tests
# whose kernels mean the same on a GPU), built wherever nvcc is (CI builds them; they need
# neither Boost nor a GPU to build) and run on a GPU machine by scripts/gpu_check.sh from the
# bundle scripts/gpu_bundle.sh makes. Here, the test `gpu_bundle` makes the bundle and checks it
# without a GPU (scripts/check_gpu_bundle.sh).
if(TARGET servekit_simt)
  servekit_test(test_gpt2_device_storage LABELS emulated
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt2_device_storage.cpp LIBS servekit_simt)
  # GPT-2 small's decode linears, launched dry: each fills an H100 at batch 1.
  servekit_test(test_decode_grid LABELS emulated
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_decode_grid.cpp LIBS servekit_simt)
endif()

if(NOT SERVEKIT_HAVE_CUDA)
  return()
endif()

# Catch2's main for device tests: lists without a device, refuses to run without one.
add_library(servekit_cuda_main OBJECT ${CMAKE_CURRENT_LIST_DIR}/cuda_main.cu)
target_link_libraries(servekit_cuda_main PUBLIC servekit::servekit servekit_cuda_flags
  Catch2::Catch2)
set_target_properties(servekit_cuda_main PROPERTIES CUDA_ARCHITECTURES "${SERVEKIT_CUDA_ARCHITECTURES}")

# servekit_cuda_test(name SOURCES a.cu ..): a device test program for the bundle. Its fixtures
# and data paths are relative to the repository root, where gpu_check.sh runs it on the GPU
# machine (a copy of this tree at another path).
function(servekit_cuda_test name)
  cmake_parse_arguments(T "" "" "SOURCES" ${ARGN})
  add_executable(${name} ${T_SOURCES} $<TARGET_OBJECTS:servekit_cuda_main>)
  servekit_cuda_program(${name})
  target_link_libraries(${name} PRIVATE Catch2::Catch2)
  target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  target_compile_definitions(${name} PRIVATE SERVEKIT_FIXTURES="tests/fixtures"
    SERVEKIT_DATA="data")
  set_property(GLOBAL APPEND PROPERTY SERVEKIT_CUDA_TESTS ${name})
endfunction()

servekit_cuda_test(test_gpt2_cuda SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt2_cuda.cu)
servekit_cuda_test(test_invariants_cuda SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda/test_invariants_cuda.cu)
# The kernel tests that launch kernels directly (their host data through tests/device_mirror.hpp).
servekit_cuda_test(test_kernels_cuda SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_kernels_attention.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_kernels_basic.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_kernels_linear.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_kernels_lora.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_kernels_lora_mma.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_kernels_mask.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_kernels_sampling.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_kernels_u8.cu)
# The engine on the device: schedulers, chunking, preemption, prefix caching, speculation, many
# adapters and constrained rows against each request alone.
servekit_cuda_test(test_engine_cuda SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda/test_engine_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_constrain_cuda.cu)
servekit_cuda_test(test_simt_cuda SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_simt_block.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_simt_warp.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_simt_mma.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_simt_memory.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda/test_simt_async.cu)

# The bundle, made from this build and checked here: every program starts and, finding no
# device, exits with its own status; each device test lists the tests its emulated twin runs
# from the same sources; the whole fits the device machine's 64 MiB carry.
if(TARGET servekit_simt)
  add_test(NAME gpu_bundle
    COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/check_gpu_bundle.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(gpu_bundle PROPERTIES LABELS cuda-compile)
endif()
