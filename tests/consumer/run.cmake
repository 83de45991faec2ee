# SPDX-License-Identifier: Apache-2.0
# cmake -DMODE=package|subdirectory -DSOURCE=<servekit> -DWORK=<dir> -P run.cmake
# Both routes must give the same program: optimised and built for this CPU although the
# consumer set no build type, the shipped vocabulary found, and nothing written into the
# consumer's cache by servekit (no build type, no CUDA compiler).
file(REMOVE_RECURSE ${WORK})
set(gen -G Ninja)
if(MODE STREQUAL "package")
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/servekit ${gen}
                    -DSERVEKIT_BUILD_TESTS=OFF -DSERVEKIT_BUILD_EXAMPLES=OFF -DSERVEKIT_CUDA=OFF
                    -DCMAKE_INSTALL_PREFIX=${WORK}/prefix
                  COMMAND_ERROR_IS_FATAL ANY)
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${WORK}/servekit COMMAND_ERROR_IS_FATAL ANY)
  set(extra -DCMAKE_PREFIX_PATH=${WORK}/prefix)
  set(vocab_dir ${WORK}/prefix/share/servekit/gpt2)
else()
  set(extra -DSERVEKIT_CONSUME=subdirectory -DSERVEKIT_SOURCE=${SOURCE})
  set(vocab_dir ${SOURCE}/data/gpt2)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/tests/consumer -B ${WORK}/consumer ${gen}
                  ${extra}
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/consumer COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=SERVEKIT_VOCAB ${WORK}/consumer/consumer
                OUTPUT_VARIABLE out COMMAND_ERROR_IS_FATAL ANY)
message(STATUS "consumer (${MODE}):\n${out}")

if(NOT out MATCHES "tiny/f32/contiguous/none/host next token [0-9]+")
  message(FATAL_ERROR "consumer did not run the model")
endif()
if(NOT out MATCHES "Hello world -> 15496 995\n")
  message(FATAL_ERROR "consumer did not tokenize with GPT-2's vocabulary")
endif()
file(REAL_PATH ${vocab_dir} want)
if(NOT out MATCHES "vocab ([^\n]+)\n")
  message(FATAL_ERROR "no vocab line")
endif()
file(REAL_PATH ${CMAKE_MATCH_1} got)
if(NOT got STREQUAL want)
  message(FATAL_ERROR "vocabulary from ${got}, expected ${want}")
endif()
if(NOT out MATCHES "optimized 1")
  message(FATAL_ERROR "servekit's code was compiled without optimisation in the consumer")
endif()
file(READ /proc/cpuinfo cpuinfo)
if(cpuinfo MATCHES " avx2" AND NOT out MATCHES "avx2 1")
  message(FATAL_ERROR "servekit::native did not build for this CPU (it has AVX2)")
endif()
file(READ ${WORK}/consumer/CMakeCache.txt cache)
if(cache MATCHES "CMAKE_BUILD_TYPE:STRING=[A-Za-z]")
  message(FATAL_ERROR "a build type was written into the consumer's cache")
endif()
if(cache MATCHES "CMAKE_CUDA_COMPILER:[A-Z]+=[^\n]*nvcc")
  message(FATAL_ERROR "CUDA was enabled in a consumer that did not ask for it")
endif()
