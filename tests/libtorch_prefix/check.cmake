# The build takes LibTorch's libraries from the LibTorch it was pointed at, even with another
# LibTorch (Debian's libtorch-dev: /usr/lib/x86_64-linux-gnu/libc10.so) on the search paths.
#   cmake -DSOURCE_DIR=<repo> -DTORCH_PREFIX_PATH=<torch/share/cmake> -DWORK=<scratch dir>
#         [-DCUDA_COMPILER=<nvcc>] -P check.cmake
# configures tests/libtorch_prefix with a fake system LibTorch (empty libc10.so, libtorch.so,
# libc10_cuda.so, libkineto.so) on CMAKE_LIBRARY_PATH, which find_library searches before
# TorchConfig.cmake's PATHS:
#   1. TorchConfig.cmake alone picks the fake libc10.so: the fake reproduces the failure;
#   2. third_party/libtorch.cmake, reconfiguring that same cache, links every torch/c10 library
#      from the wheel's prefix;
#   3. its check, handed a library outside the prefix, stops configuring with one clear line.
#   cmake -DBINARY=<nanochat> -DTORCH_PREFIX=<torch prefix> -P check.cmake
# checks with ldd that the built binary loads libc10, libtorch and libtorch_cpu from the prefix.
cmake_minimum_required(VERSION 3.22)

# stops with `message` unless `condition` (if() syntax, as a string) holds
function(expect condition message)
  cmake_language(EVAL CODE "if(NOT (${condition}))\n  message(FATAL_ERROR [==[FAIL: ${message}]==])\nendif()")
endfunction()

# true when `path` (resolved) lies under `dir` (resolved)
function(under path dir out)
  get_filename_component(p "${path}" REALPATH)
  get_filename_component(d "${dir}" REALPATH)
  string(FIND "${p}/" "${d}/" at)
  if(at EQUAL 0)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

if(BINARY)
  execute_process(COMMAND ldd "${BINARY}" OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  expect("rc EQUAL 0" "ldd ${BINARY} failed")
  foreach(lib libc10.so libtorch.so libtorch_cpu.so)
    string(REGEX MATCH "[\t ]${lib} => ([^ ]+)" m "${out}")
    expect("m" "${BINARY} does not load ${lib}:\n${out}")
    under("${CMAKE_MATCH_1}" "${TORCH_PREFIX}" ok)
    expect("ok" "${BINARY} loads ${lib} from ${CMAKE_MATCH_1}, outside ${TORCH_PREFIX}")
    message(STATUS "${lib} => ${CMAKE_MATCH_1}")
  endforeach()
  return()
endif()

set(fake "${WORK}/fake_system/lib")
set(build "${WORK}/build")
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${fake}")
foreach(lib c10 torch c10_cuda kineto torch_cpu)
  file(WRITE "${fake}/lib${lib}.so" "")
endforeach()
set(args -S "${SOURCE_DIR}/tests/libtorch_prefix" -B "${build}" "-DNANOCHAT_SOURCE_DIR=${SOURCE_DIR}"
         "-DCMAKE_PREFIX_PATH=${TORCH_PREFIX_PATH}" "-DCMAKE_LIBRARY_PATH=${fake}")
if(CUDA_COMPILER)
  list(APPEND args "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}")
endif()

# 1. TorchConfig.cmake alone
execute_process(COMMAND "${CMAKE_COMMAND}" ${args} -DNANOCHAT_PLAIN=ON OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
expect("rc EQUAL 0" "plain find_package(Torch) failed:\n${out}${err}")
file(STRINGS "${build}/libraries.txt" c10 REGEX "^c10=")
expect("c10 STREQUAL \"c10=${fake}/libc10.so\"" "the fake system LibTorch was not picked (${c10}): the test reproduces nothing")
message(STATUS "1. TorchConfig.cmake alone: ${c10}")

# 2. third_party/libtorch.cmake on the same cache
execute_process(COMMAND "${CMAKE_COMMAND}" ${args} -DNANOCHAT_PLAIN=OFF OUTPUT_VARIABLE out ERROR_VARIABLE err
                RESULT_VARIABLE rc)
expect("rc EQUAL 0" "configuring with third_party/libtorch.cmake failed:\n${out}${err}")
file(STRINGS "${build}/libraries.txt" lines)
string(REGEX MATCH "prefix=([^;]*)" m "${lines}")
set(prefix "${CMAKE_MATCH_1}")
expect("EXISTS \"${prefix}/lib\"" "no LibTorch prefix in ${build}/libraries.txt")
foreach(line IN LISTS lines)
  string(REGEX MATCH "^([a-z0-9_]+)=(.*)$" m "${line}")
  set(key "${CMAKE_MATCH_1}")
  set(value "${CMAKE_MATCH_2}")
  if(key MATCHES "^(c10|torch|c10_cuda)$")
    under("${value}" "${prefix}" ok)
    expect("ok" "${key} is ${value}, outside ${prefix}")
  endif()
  string(FIND "${value}" "${fake}" at)
  expect("at EQUAL -1" "${key} names the fake system LibTorch: ${value}")
  message(STATUS "2. ${line}")
endforeach()

# 3. the check, handed a library outside the prefix
execute_process(COMMAND "${CMAKE_COMMAND}" ${args} "-DNANOCHAT_OUTSIDE=${fake}/libtorch_cpu.so"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
expect("NOT rc EQUAL 0" "a library outside the prefix was accepted")
string(REGEX REPLACE "[ \n]+" " " err "${err}")  # CMake wraps a message's lines
string(FIND "${err}" "LibTorch's libtorch_cpu.so would be linked from ${fake}/libtorch_cpu.so, outside the LibTorch at ${prefix} (" at)
expect("NOT at EQUAL -1" "the error does not say which library lies where:\n${err}")
message(STATUS "3. refused: ${fake}/libtorch_cpu.so")
file(REMOVE_RECURSE "${WORK}")
