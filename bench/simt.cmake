# SPDX-License-Identifier: Apache-2.0
# simt_micro: costs of the emulator's primitives (fiber switch, barrier, shuffle, launch, SGEMM).
if(NOT TARGET servekit_simt)
  # Same definition as in tests/simt.cmake (whichever directory is configured first makes it).
  find_package(Boost REQUIRED COMPONENTS context)
  find_package(CUDAToolkit REQUIRED)
  add_library(servekit_simt INTERFACE)
  target_link_libraries(servekit_simt INTERFACE servekit::servekit Boost::context)
  target_include_directories(servekit_simt SYSTEM INTERFACE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_options(servekit_simt INTERFACE -fstack-clash-protection -Wno-unknown-pragmas)
endif()
add_executable(simt_micro ${CMAKE_CURRENT_SOURCE_DIR}/simt_micro.cpp)
target_link_libraries(simt_micro PRIVATE servekit_simt servekit_warnings)
