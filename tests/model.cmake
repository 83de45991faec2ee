# SPDX-License-Identifier: Apache-2.0
servekit_test(test_gpt2_hf LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt2_hf.cpp)
servekit_test(test_gpt2_errors LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_gpt2_errors.cpp)
servekit_test(test_generate LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_generate.cpp)
servekit_test(test_host_matmul LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_host_matmul.cpp)
servekit_test(test_thread_pool LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_thread_pool.cpp)
