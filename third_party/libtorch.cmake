# LibTorch, with every torch/c10 library taken from the LibTorch we were pointed at (the torch
# wheel's prefix, or a LibTorch zip), never from the system.
#
# Why: TorchConfig.cmake finds libc10, libtorch, libc10_cuda and libkineto with
# find_library(... PATHS <prefix>/lib), and find_library searches the system's folders before
# PATHS. With Debian's libtorch-dev installed (it comes with python3-torch) it picks
# /usr/lib/x86_64-linux-gnu/libc10.so beside the wheel's libtorch: the binaries then load two
# c10 libraries and abort at start. So the cache variables of those find_library calls are set
# to the prefix's files first (find_library keeps a variable that is already set), and after
# find_package(Torch) every torch/c10 library that would be linked is checked to lie under the
# prefix; configuring stops with one line otherwise.

# the LibTorch prefix find_package(Torch) will use: TorchConfig.cmake lies in
# <prefix>/share/cmake/Torch, found through Torch_DIR or CMAKE_PREFIX_PATH
set(_nanochat_torch_prefix "")
if(DEFINED ENV{TORCH_INSTALL_PREFIX})  # TorchConfig.cmake honours it too
  set(_nanochat_torch_prefix "$ENV{TORCH_INSTALL_PREFIX}")
else()
  set(_nanochat_torch_dirs "")
  if(Torch_DIR)
    list(APPEND _nanochat_torch_dirs "${Torch_DIR}")
  endif()
  string(REPLACE ":" ";" _nanochat_env_prefixes "$ENV{CMAKE_PREFIX_PATH}")
  foreach(_p IN LISTS CMAKE_PREFIX_PATH _nanochat_env_prefixes)
    list(APPEND _nanochat_torch_dirs "${_p}" "${_p}/Torch" "${_p}/share/cmake/Torch")
  endforeach()
  foreach(_d IN LISTS _nanochat_torch_dirs)
    if(EXISTS "${_d}/TorchConfig.cmake")
      get_filename_component(_nanochat_torch_prefix "${_d}/../../.." ABSOLUTE)
      break()
    endif()
  endforeach()
endif()

if(_nanochat_torch_prefix)
  # the variables TorchConfig.cmake's find_library calls fill; FORCE also mends a cache that an
  # earlier configure filled from the system. A library the prefix lacks (the wheel has no
  # libkineto) is set empty: find_library then leaves it alone and TorchConfig skips it.
  foreach(_pair "c10_LIBRARY;c10" "C10_CUDA_LIBRARY;c10_cuda" "TORCH_LIBRARY;torch" "kineto_LIBRARY;kineto")
    list(GET _pair 0 _var)
    list(GET _pair 1 _name)
    set(_file "${_nanochat_torch_prefix}/lib/${CMAKE_SHARED_LIBRARY_PREFIX}${_name}${CMAKE_SHARED_LIBRARY_SUFFIX}")
    if(NOT EXISTS "${_file}")
      set(_file "${_nanochat_torch_prefix}/lib/${CMAKE_STATIC_LIBRARY_PREFIX}${_name}${CMAKE_STATIC_LIBRARY_SUFFIX}")
    endif()
    if(NOT EXISTS "${_file}")
      set(_file "")
    endif()
    set(${_var} "${_file}" CACHE FILEPATH "LibTorch's ${_name}, from the LibTorch prefix (third_party/libtorch.cmake)" FORCE)
  endforeach()
endif()

find_package(Torch REQUIRED)
if(Torch_VERSION VERSION_LESS 2.9)
  message(FATAL_ERROR "nanochat needs LibTorch >= 2.9 (found ${Torch_VERSION}); run runs/setup.sh")
endif()

# every torch/c10 library in the list `libs` (paths or targets: their imported files and, in
# turn, their interface link libraries) must lie under `prefix`; else one FATAL_ERROR line
function(nanochat_torch_libraries_under prefix libs)
  get_filename_component(prefix_real "${prefix}" REALPATH)
  set(files "")
  set(seen "")
  set(todo ${libs})
  while(todo)
    list(POP_FRONT todo item)
    if(item IN_LIST seen)
      continue()
    endif()
    list(APPEND seen "${item}")
    if(TARGET "${item}")
      get_target_property(type "${item}" TYPE)
      get_target_property(imported "${item}" IMPORTED)
      if(imported AND NOT type STREQUAL "INTERFACE_LIBRARY")
        foreach(prop IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION IMPORTED_LOCATION_NOCONFIG)
          get_target_property(loc "${item}" ${prop})
          if(loc)
            list(APPEND files "${loc}")
          endif()
        endforeach()
      endif()
      get_target_property(deps "${item}" INTERFACE_LINK_LIBRARIES)
      if(deps)
        list(APPEND todo ${deps})
      endif()
    elseif(IS_ABSOLUTE "${item}")
      list(APPEND files "${item}")
    endif()
  endwhile()
  foreach(file IN LISTS files)
    get_filename_component(name "${file}" NAME)
    if(NOT name MATCHES "^(lib)?(torch|c10|kineto)[_.a-z0-9]*\\.(so|a|dylib|lib)")
      continue()  # CUDA's and the system's own libraries (nvrtc, cudart, ...) are not LibTorch's
    endif()
    get_filename_component(real "${file}" REALPATH)
    string(FIND "${real}/" "${prefix_real}/" at)
    if(NOT at EQUAL 0)
      message(FATAL_ERROR "LibTorch's ${name} would be linked from ${file}, outside the LibTorch at ${prefix} "
                          "(another LibTorch on the system, e.g. Debian's libtorch-dev?): take it off the "
                          "search paths, or delete the build folder's CMakeCache.txt")
    endif()
  endforeach()
endfunction()
nanochat_torch_libraries_under("${TORCH_INSTALL_PREFIX}" "${TORCH_LIBRARIES}")
