# SPDX-License-Identifier: Apache-2.0
add_executable(01_kv_cache ${CMAKE_CURRENT_LIST_DIR}/01_kv_cache/main.cpp)
target_link_libraries(01_kv_cache PRIVATE servekit::servekit servekit_warnings CLI11::CLI11)
target_include_directories(01_kv_cache PRIVATE ${CMAKE_CURRENT_LIST_DIR})

# The same lesson on the Cuda backend, compiled by nvcc (built, not run, where there is no GPU).
if(SERVEKIT_HAVE_CUDA)
  add_executable(01_kv_cache_cuda ${CMAKE_CURRENT_LIST_DIR}/01_kv_cache/main_cuda.cu)
  target_link_libraries(01_kv_cache_cuda PRIVATE servekit::servekit servekit_cuda_flags CLI11::CLI11)
  target_include_directories(01_kv_cache_cuda PRIVATE ${CMAKE_CURRENT_LIST_DIR})
  set_target_properties(01_kv_cache_cuda PROPERTIES CUDA_ARCHITECTURES "${SERVEKIT_CUDA_ARCHITECTURES}")
endif()
