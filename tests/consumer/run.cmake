# SPDX-License-Identifier: Apache-2.0
# cmake -DMODE=package|subdirectory -DSOURCE=<servekit> -DWORK=<dir> -P run.cmake
file(REMOVE_RECURSE ${WORK})
set(gen -G Ninja)
if(MODE STREQUAL "package")
  execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/servekit ${gen}
                    -DSERVEKIT_BUILD_TESTS=OFF -DSERVEKIT_BUILD_EXAMPLES=OFF -DSERVEKIT_CUDA=OFF
                    -DCMAKE_INSTALL_PREFIX=${WORK}/prefix
                  COMMAND_ERROR_IS_FATAL ANY)
  execute_process(COMMAND ${CMAKE_COMMAND} --install ${WORK}/servekit COMMAND_ERROR_IS_FATAL ANY)
  set(extra -DCMAKE_PREFIX_PATH=${WORK}/prefix)
else()
  set(extra -DSERVEKIT_CONSUME=subdirectory -DSERVEKIT_SOURCE=${SOURCE} -DSERVEKIT_CUDA=OFF)
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE}/tests/consumer -B ${WORK}/consumer ${gen}
                  -DCMAKE_BUILD_TYPE=Release ${extra}
                COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK}/consumer COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND ${WORK}/consumer/consumer OUTPUT_VARIABLE out COMMAND_ERROR_IS_FATAL ANY)
if(NOT out MATCHES "tiny/f32/contiguous/none/host next token [0-9]+")
  message(FATAL_ERROR "consumer printed: ${out}")
endif()
message(STATUS "consumer (${MODE}): ${out}")
