# SPDX-License-Identifier: Apache-2.0
servekit_test(test_kv_hf LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_hf.cpp)
servekit_test(test_kv_batch LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_batch.cpp)
servekit_test(test_kv_errors LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_kv_errors.cpp)
servekit_test(test_prefix_index LABELS host
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_prefix_index.cpp)
servekit_test(test_divider LABELS host SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_divider.cpp)
