# SPDX-License-Identifier: Apache-2.0
servekit_test(test_gpt2_hf LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt2_hf.cpp)
servekit_test(test_gpt2_errors LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt2_errors.cpp)
servekit_test(test_generate LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_generate.cpp)
servekit_test(test_host_matmul LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_host_matmul.cpp)
servekit_test(test_thread_pool LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_thread_pool.cpp)

# The host kernels take their vector width and register tiles from the target's flags
# (kernels/host/simd.hpp: AVX-512, AVX2 or SSE). The suite is built for this CPU; these build
# the host kernels' tests again for AVX2 + FMA + F16C (x86-64-v3) and for SSE2 alone (x86-64),
# which any x86-64 machine runs, so that every width is tested whichever machine CI is on.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  foreach(arch x86-64-v3 x86-64)
    string(REPLACE "-" "_" isa ${arch})
    servekit_test(test_host_matmul_${isa} LABELS host isa MARCH ${arch}
      SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_host_matmul.cpp)
    if(TARGET servekit_simt)  # the attention test file also runs the emulated kernels
      servekit_test(test_host_attention_${isa} LABELS host isa MARCH ${arch} ARGS "[host]"
        SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_attention.cpp LIBS servekit_simt)
    endif()
  endforeach()
  # W8A8's ymm vpdpbusd tile (AVX-VNNI on AVX2 cores) runs here as its EVEX twin: x86-64-v3
  # plus AVX-512 VNNI + VL (no BW, which would choose the zmm tile), where the CPU has them.
  file(READ /proc/cpuinfo servekit_cpuinfo LIMIT 8192)
  if(servekit_cpuinfo MATCHES "avx512_vnni" AND servekit_cpuinfo MATCHES "avx512vl")
    servekit_test(test_host_matmul_avx_vnni LABELS host isa MARCH x86-64-v3
      SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_host_matmul.cpp)
    target_compile_options(test_host_matmul_avx_vnni PRIVATE -mavx512vnni -mavx512vl)
  endif()
  # ... and the micro-kernel's accumulators stay in registers through its k loop on AVX2 and
  # AVX-512, which is the compiler's choice (scripts/check_host_tiles.sh reads its assembly).
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_test(NAME host_tiles_asm
      COMMAND ${PROJECT_SOURCE_DIR}/scripts/check_host_tiles.sh ${CMAKE_CXX_COMPILER}
              ${CMAKE_CURRENT_BINARY_DIR}/host_tiles)
    set_tests_properties(host_tiles_asm PROPERTIES LABELS "host;isa")
  endif()
endif()

# The step plan's layout, and k rows of logits per sequence on the host and under the emulator.
if(TARGET servekit_simt)
  servekit_test(test_step_plan LABELS host emulated
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_step_plan.cpp LIBS servekit_simt)
endif()
