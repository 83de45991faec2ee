# SPDX-License-Identifier: Apache-2.0
# AddressSanitizer + UndefinedBehaviorSanitizer builds (label `sanitize`): the CLI with the test
# that drives it, the host tests of everything that reads untrusted input or hands results
# across lifetimes (checkpoints, configs, tokenizer, generate, the engine), and the engine and
# the device sampler under emulation. detect_stack_use_after_return=1 catches a reference to a
# dead stack frame, the kind of bug that once made every CLI run exit with a random status while
# the plain build passed by the luck of the stack's contents. Any report fails the test
# (-fno-sanitize-recover). Only these targets are built twice, to keep CI's time down; the
# threaded code has its ThreadSanitizer build in engine.cmake and thread_pool's tests.
# -Og -g1: a report's stack needs functions and lines, not variables, and UBSan's checks cost
# the optimiser most at -O1: test_engine_asan compiles in 86 s rather than 230 s and runs 58 s
# rather than 51 s.
set(SERVEKIT_SANITIZE_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all
  -fno-omit-frame-pointer -g1 -Og)
set(SERVEKIT_ASAN_OPTIONS "ASAN_OPTIONS=detect_stack_use_after_return=1:detect_leaks=1:strict_string_checks=1"
  "UBSAN_OPTIONS=print_stacktrace=1")

function(servekit_sanitize target)
  target_compile_options(${target} PRIVATE ${SERVEKIT_SANITIZE_FLAGS})
  target_link_options(${target} PRIVATE -fsanitize=address,undefined)
endfunction()

if(TARGET servekit_cli)
  # The CLI itself, as servekit under build/tests/asan/ (its vocabulary is found the same way),
  # with the compositions test_cli runs (each scheduler without LoRA, gathered adapters under
  # the continuous one), the shapes the tests load (model/dispatch.hpp), and no
  # HTTP server, which test_cli does not drive (apps/run_composition.hpp).
  servekit_cli_program(servekit_cli_asan ONE_UNIT
    COMPOSITIONS f32/contiguous/none/continuous/host f32/contiguous/none/static/host
      f32/contiguous/none/sequential/host f32/contiguous/gathered/continuous/host
    DEFINITIONS SERVEKIT_COMPILED_DIMS_FOR_TESTS SERVEKIT_CLI_NO_SERVE)
  set_target_properties(servekit_cli_asan PROPERTIES OUTPUT_NAME servekit
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/asan)
  servekit_sanitize(servekit_cli_asan)

  servekit_test(test_cli_asan LABELS host sanitize SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_cli.cpp)
  target_compile_definitions(test_cli_asan PRIVATE SERVEKIT_CLI="$<TARGET_FILE:servekit_cli_asan>"
    SERVEKIT_COMPILED_DIMS_FOR_TESTS)
  add_dependencies(test_cli_asan servekit_cli_asan)
  servekit_sanitize(test_cli_asan)
  set_tests_properties(test_cli_asan PROPERTIES ENVIRONMENT "${SERVEKIT_ASAN_OPTIONS}")
endif()

# One executable per file, as in the plain build (files share helper names). test_engine's
# invariance cases ([invariance]: many requests of up to 500 tokens, per scheduler, greedy and
# seeded) are left to the plain build: under ASan they take minutes and add nothing the other
# engine cases do not exercise (submit, cancel, preemption, stop rules, results handed across
# threads).
set(test_engine_asan_args "~[invariance]")
# test_constrain's corpus case feeds every token of the vocabulary on its own at 600 points: a
# minute and a half under ASan, in the test's brute force, not the masks. The other cases run
# the masks under ASan, and the json_schema fuzz target under ASan and UBSan.
set(test_constrain_asan_args "~[corpus]")
# The range arithmetic (128-bit, signed) is where UBSan has most to say.
set(test_constrain_asan_more ${CMAKE_CURRENT_LIST_DIR}/test_constrain_ranges.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_constrain_keywords.cpp)
foreach(t test_bad_inputs test_safetensors test_load_gpt2 test_tokenizer_errors test_engine
    test_constrain)
  servekit_test(${t}_asan LABELS host sanitize
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/${t}.cpp ${${t}_asan_more} ARGS ${${t}_asan_args})
  servekit_sanitize(${t}_asan)
  target_compile_definitions(${t}_asan PRIVATE SERVEKIT_SOURCE_TESTS="${CMAKE_CURRENT_LIST_DIR}")
  set_tests_properties(${t}_asan PROPERTIES ENVIRONMENT "${SERVEKIT_ASAN_OPTIONS}")
endforeach()

if(TARGET servekit_simt)
  # The device sampler and the emulator under it. The emulator's fibers switch stacks under
  # ASan's annotations (simt/fiber.hpp), so use-after-return detection works there too.
  # Not the frequency test: it draws tens of thousands of tokens through the same kernel the
  # other cases run, three quarters of the time under ASan for no other code. The plain build
  # has it.
  servekit_test(test_kernels_sampling_asan LABELS emulated sanitize
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kernels_sampling.cpp LIBS servekit_simt
    ARGS "~draws follow the filtered distribution*")
  servekit_sanitize(test_kernels_sampling_asan)
  set_tests_properties(test_kernels_sampling_asan PROPERTIES ENVIRONMENT "${SERVEKIT_ASAN_OPTIONS}")
endif()

# ThreadSanitizer: the host thread pool and the kernels that run on it (the engine's threads
# have test_engine_tsan in engine.cmake, built the same way: Catch's main compiled with TSan).
# Not the oracle comparison ([oracle]): it runs every format's linear once at one thread count,
# the same parallel code the invariance cases run for eight formats at every thread count, and
# under TSan it took half of this test's 300 s on a 2-core machine.
add_executable(test_pool_tsan ${CMAKE_CURRENT_LIST_DIR}/test_thread_pool.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_host_matmul.cpp $<TARGET_OBJECTS:servekit_catch_main_tsan>)
target_link_libraries(test_pool_tsan PRIVATE servekit::servekit servekit_warnings Catch2::Catch2)
target_compile_options(test_pool_tsan PRIVATE ${SERVEKIT_TSAN_FLAGS})
target_link_options(test_pool_tsan PRIVATE -fsanitize=thread)
add_test(NAME test_pool_tsan
  COMMAND setarch ${CMAKE_HOST_SYSTEM_PROCESSOR} -R $<TARGET_FILE:test_pool_tsan> "~[oracle]")
set_tests_properties(test_pool_tsan PROPERTIES LABELS "host;sanitize"
  ENVIRONMENT "OMP_NUM_THREADS=1;SERVEKIT_THREADS=3;TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1")
