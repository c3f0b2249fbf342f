# One ctest test per GoogleTest suite, not per case: a test process costs ~0.5 s of start-up
# (LibTorch's static registrations), so ~800 processes of one case each spent about a third of
# ctest's time starting. The suite's cases run in one process; gtest's summary names the case
# that failed. Like gtest_discover_tests' PRE_TEST mode, the list is read from
# `<binary> --gtest_list_tests` when ctest starts, again only after the binary changed.
#   nanochat_gtest_suites(target [TEST_PREFIX p] [TEST_FILTER f] [PROPERTIES name value ...])
# A suite whose cases all skipped exits 77 (tests/gtest_main.cpp), which ctest reports as skipped.

set(_NANOCHAT_GTEST_SUITES_SCRIPT ${CMAKE_CURRENT_LIST_FILE})

function(nanochat_gtest_suites target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "TEST_PREFIX;TEST_FILTER" "PROPERTIES")
  get_property(n TARGET ${target} PROPERTY NANOCHAT_SUITE_LISTS)
  math(EXPR n "${n} + 1")  # a target may be listed several times (prefixes, filters)
  set_property(TARGET ${target} PROPERTY NANOCHAT_SUITE_LISTS ${n})
  set(base "${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_${n}")
  # each property value bracket-quoted, so that a value may hold spaces
  set(props "")
  foreach(p IN LISTS arg_PROPERTIES)
    string(APPEND props " [==[${p}]==]")
  endforeach()
  file(GENERATE OUTPUT "${base}_include.cmake" CONTENT
"if(EXISTS [==[$<TARGET_FILE:${target}>]==])
  if(NOT EXISTS [==[${base}_tests.cmake]==] OR
     NOT [==[${base}_tests.cmake]==] IS_NEWER_THAN [==[$<TARGET_FILE:${target}>]==] OR
     NOT [==[${base}_tests.cmake]==] IS_NEWER_THAN \"\${CMAKE_CURRENT_LIST_FILE}\" OR
     NOT [==[${base}_tests.cmake]==] IS_NEWER_THAN [==[${_NANOCHAT_GTEST_SUITES_SCRIPT}]==])
    include([==[${_NANOCHAT_GTEST_SUITES_SCRIPT}]==])
    nanochat_gtest_suites_list([==[$<TARGET_FILE:${target}>]==] [==[${CMAKE_CURRENT_BINARY_DIR}/${target}_cases.txt]==]
                               [==[${base}_tests.cmake]==] [==[${arg_TEST_PREFIX}]==] [==[${arg_TEST_FILTER}]==]${props})
  endif()
  include([==[${base}_tests.cmake]==])
else()
  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)
endif()
")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${base}_include.cmake")
endfunction()

# At ctest time: the binary's cases ("Suite.Case"), listed once per build of the binary into
# `cases_file`, which all its lists share (each listing is a process start).
function(nanochat_gtest_cases binary cases_file out)
  if(NOT EXISTS "${cases_file}" OR NOT "${cases_file}" IS_NEWER_THAN "${binary}")
    execute_process(COMMAND "${binary}" --gtest_list_tests TIMEOUT 60 OUTPUT_VARIABLE output RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${binary} --gtest_list_tests failed (${rc}):\n${output}")
    endif()
    string(REPLACE ";" "" output "${output}")  # no gtest name holds one; the list below splits on it
    string(REPLACE "\n" ";" lines "${output}")
    set(cases)
    set(suite)
    foreach(line IN LISTS lines)
      if(line MATCHES "^([A-Za-z_][A-Za-z0-9_/]*)\\.( +#.*)?$")
        set(suite "${CMAKE_MATCH_1}")
        if(suite MATCHES "^DISABLED_")
          set(suite)
        endif()
      elseif(suite AND line MATCHES "^  ([A-Za-z0-9_/]+)( +#.*)?$")
        set(case "${CMAKE_MATCH_1}")
        if(NOT case MATCHES "^DISABLED_")
          list(APPEND cases "${suite}.${case}")
        endif()
      endif()
    endforeach()
    list(JOIN cases "\n" text)
    file(WRITE "${cases_file}" "${text}\n")
  endif()
  file(STRINGS "${cases_file}" cases)
  set(${out} ${cases} PARENT_SCOPE)
endfunction()

# gtest's --gtest_filter as a regex: ':'-separated globs (* and ?) over "Suite.Case"; the names
# are identifiers, so '.' is the one character to escape
function(nanochat_gtest_globs_regex globs out)
  string(REPLACE "." "\\." globs "${globs}")
  string(REPLACE "*" ".*" globs "${globs}")
  string(REPLACE "?" "." globs "${globs}")
  string(REPLACE ":" "|" globs "${globs}")
  set(${out} "^(${globs})$" PARENT_SCOPE)
endfunction()

# Group the binary's cases that pass the filter ("positive[-negative]", as gtest reads it) by
# suite and write one add_test per suite: `Suite.*` where the filter keeps the whole suite, else
# its cases by name.
function(nanochat_gtest_suites_list binary cases_file out prefix filter)
  set(positive "${filter}")
  set(negative "")
  string(FIND "${filter}" "-" dash)
  if(dash GREATER -1)
    string(SUBSTRING "${filter}" 0 ${dash} positive)
    math(EXPR after "${dash} + 1")
    string(SUBSTRING "${filter}" ${after} -1 negative)
  endif()
  if(positive STREQUAL "")
    set(positive "*")
  endif()
  nanochat_gtest_globs_regex("${positive}" positive_re)
  nanochat_gtest_globs_regex("${negative}" negative_re)
  nanochat_gtest_cases("${binary}" "${cases_file}" cases)
  set(suites)
  foreach(case IN LISTS cases)
    string(REGEX MATCH "^[^.]+" suite "${case}")
    if(NOT DEFINED all_${suite})
      list(APPEND suites "${suite}")
      set(all_${suite} 0)
      set(kept_${suite})
    endif()
    math(EXPR all_${suite} "${all_${suite}} + 1")
    if(case MATCHES "${positive_re}" AND NOT (negative AND case MATCHES "${negative_re}"))
      list(APPEND kept_${suite} "${case}")
    endif()
  endforeach()
  set(script "")
  foreach(suite IN LISTS suites)
    list(LENGTH kept_${suite} n)
    if(n EQUAL 0)
      continue()
    elseif(n EQUAL all_${suite})
      set(suite_filter "${suite}.*")
    else()
      list(JOIN "kept_${suite}" ":" suite_filter)
    endif()
    string(APPEND script "add_test([==[${prefix}${suite}]==] [==[${binary}]==] [==[--gtest_filter=${suite_filter}]==])\n"
                         "set_tests_properties([==[${prefix}${suite}]==] PROPERTIES SKIP_RETURN_CODE 77")
    foreach(p IN LISTS ARGN)
      string(APPEND script " [==[${p}]==]")
    endforeach()
    string(APPEND script ")\n")
  endforeach()
  file(WRITE "${out}" "${script}")
endfunction()
