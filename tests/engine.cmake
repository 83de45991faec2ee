# SPDX-License-Identifier: Apache-2.0
# The serving engine (serve/engine.hpp): schedulers against generate() alone, threads and
# cancellation, bad requests; on the host backend and, smaller, under emulation.
servekit_test(test_engine LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine.cpp)
# A prompt's log-probabilities: HF's, and the same bits in any step.
servekit_test(test_prompt_logprobs LABELS host
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_prompt_logprobs.cpp)
# Priority scheduling: order, preemption for the urgent, the same bits.
servekit_test(test_priority LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_priority.cpp)
# A scheduler from outside the library, written against the concept alone.
servekit_test(test_custom_scheduler LABELS host
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_custom_scheduler.cpp)

if(TARGET servekit_simt)
  servekit_test(test_engine_emulated LABELS emulated
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_engine_emulated.cpp LIBS servekit_simt)
endif()

# The threaded engine test under ThreadSanitizer: 8 submitting threads, cancellations and the
# engine loop. OpenMP runs one thread there, since TSan cannot see libgomp's barriers. Catch's
# main is compiled with TSan too, not taken from servekit_catch_main: an uninstrumented
# object linked first supplies the one copy of inline functions such as shared_ptr's release
# (without libstdc++'s TSan variant), and TSan then reports every cross-thread release as a race
# (hence servekit_catch_main_tsan, tests/CMakeLists.txt).
add_executable(test_engine_tsan ${CMAKE_CURRENT_LIST_DIR}/test_engine.cpp
  ${CMAKE_CURRENT_LIST_DIR}/test_adapter_store.cpp ${CMAKE_CURRENT_LIST_DIR}/test_priority.cpp
  $<TARGET_OBJECTS:servekit_catch_main_tsan>)
target_link_libraries(test_engine_tsan PRIVATE servekit::servekit servekit_warnings Catch2::Catch2)
target_compile_definitions(test_engine_tsan PRIVATE
  SERVEKIT_FIXTURES="${SERVEKIT_FIXTURES}" SERVEKIT_DATA="${SERVEKIT_DATA}")
target_compile_options(test_engine_tsan PRIVATE ${SERVEKIT_TSAN_FLAGS})
target_link_options(test_engine_tsan PRIVATE -fsanitize=thread)
# Only the threaded cases (the engine's, the adapter store's loader thread beside it, and the
# priority cases that hold the engine thread while a request is submitted, tagged [threads]):
# everything else is single-threaded above the engine. Address-space
# randomisation off (setarch -R): TSan's fixed shadow layout can collide with a randomised
# mapping on some kernels and abort before the test starts.
add_test(NAME test_engine_tsan
  COMMAND setarch ${CMAKE_HOST_SYSTEM_PROCESSOR} -R $<TARGET_FILE:test_engine_tsan> "[threads],[store]")
set_tests_properties(test_engine_tsan PROPERTIES LABELS host
  ENVIRONMENT "OMP_NUM_THREADS=1;TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1")
