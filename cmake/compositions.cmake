# SPDX-License-Identifier: Apache-2.0
# Which compositions the CLI is compiled with (include/servekit/serve/compiled.hpp).
#
#   -DSERVEKIT_COMPOSITIONS=default        the list in compiled.hpp (every value of every axis at
#                                          least once; the default)
#   -DSERVEKIT_COMPOSITIONS=all            the full product (hundreds: hours on a laptop)
#   -DSERVEKIT_COMPOSITIONS="default;f16/paged32-f16/gathered/continuous/host"
#
# An entry is weights/kv/lora/scheduler/backend in compiled.hpp's spellings; a field may be *
# for each of its usual values. Entries for a backend this build lacks (cuda without nvcc,
# emulated without Boost.context) are left out, and configure says so.
set(SERVEKIT_COMPOSITIONS "default" CACHE STRING
  "Compositions the CLI is compiled with: default, all, or a ;-list of weights/kv/lora/scheduler/backend")

set(servekit_axis_values_0 f32 f16 bf16 u8 u8-channel u8-group64 w8a8)
set(servekit_axis_values_1 contiguous contiguous-f16 contiguous-i8 paged16 paged16-f16 paged16-i8)
set(servekit_axis_values_2 none loop gathered segmented)
set(servekit_axis_values_3 continuous static sequential)
set(servekit_axis_values_4 host emulated cuda)

# The default list, read from compiled.hpp (one source for the C++ and the build).
function(servekit_default_compositions out)
  file(READ ${PROJECT_SOURCE_DIR}/include/servekit/serve/compiled.hpp text)
  string(REGEX MATCH "servekit-default-compositions-begin(.*)servekit-default-compositions-end"
    block "${text}")
  string(REGEX MATCHALL "\"[^\"]+\"" quoted "${CMAKE_MATCH_1}")
  set(list "")
  foreach(q ${quoted})
    string(REPLACE "\"" "" name "${q}")
    list(APPEND list "${name}")
  endforeach()
  set(${out} "${list}" PARENT_SCOPE)
endfunction()

# Expands * fields: "f32/*/none/continuous/host" -> four entries.
function(servekit_expand_composition entry out)
  set(partial "")
  string(REPLACE "/" ";" fields "${entry}")
  list(LENGTH fields n)
  if(NOT n EQUAL 5)
    message(FATAL_ERROR "SERVEKIT_COMPOSITIONS: '${entry}' has ${n} fields; expected "
      "weights/kv/lora/scheduler/backend")
  endif()
  set(partial "")
  foreach(i RANGE 4)
    list(GET fields ${i} f)
    if(f STREQUAL "*")
      set(values ${servekit_axis_values_${i}})
    else()
      set(values ${f})
    endif()
    if(i EQUAL 0)
      set(partial ${values})
    else()
      set(next "")
      foreach(p ${partial})
        foreach(v ${values})
          list(APPEND next "${p}/${v}")
        endforeach()
      endforeach()
      set(partial ${next})
    endif()
  endforeach()
  set(${out} "${partial}" PARENT_SCOPE)
endfunction()

# servekit_compositions(out spec...): the entries a spec names, those this build can compile.
function(servekit_compositions out)
  set(entries "")
  foreach(item ${ARGN})
    if(item STREQUAL "default")
      servekit_default_compositions(d)
      list(APPEND entries ${d})
    elseif(item STREQUAL "all")
      servekit_expand_composition("*/*/*/*/*" e)
      list(APPEND entries ${e})
    else()
      servekit_expand_composition("${item}" e)
      list(APPEND entries ${e})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES entries)
  set(kept "")
  set(dropped "")
  foreach(e ${entries})
    if((e MATCHES "/cuda$" AND NOT SERVEKIT_HAVE_CUDA) OR
       (e MATCHES "/emulated$" AND NOT SERVEKIT_HAVE_EMULATION))
      list(APPEND dropped ${e})
    else()
      list(APPEND kept ${e})
    endif()
  endforeach()
  if(dropped)
    string(REPLACE ";" ", " d "${dropped}")
    message(STATUS "servekit: compositions left out (no nvcc or no Boost.context): ${d}")
  endif()
  set(${out} "${kept}" PARENT_SCOPE)
endfunction()
