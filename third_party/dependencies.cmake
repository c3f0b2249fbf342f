# System dependencies only (no copied code): LibTorch from the venv's torch wheel or a
# LibTorch zip (CMAKE_PREFIX_PATH), the CUDA toolkit when LibTorch has CUDA, and Debian's
# -dev packages. Everything lands in one interface target, nanochat_deps.

# The GPUs the CUDA kernels (src/kernels/*.cu) are built for. Each architecture costs every .cu
# file ~4 s of device compile on top of ~9 s of host compile, so a build compiles for the GPUs it
# sees (nvidia-smi; 9.0 as 9.0a, the H100's full instruction set) and, on a machine with none
# (a laptop, CI), for A100's sm_80 plus compute_80 PTX, which the driver compiles for any newer
# GPU (H100, Blackwell) at first use. LibTorch's CMake config takes the list as
# TORCH_CUDA_ARCH_LIST and turns it into nvcc's -gencode flags (it overrides
# CMAKE_CUDA_ARCHITECTURES; without a list it builds for a dozen). A list given by the user wins:
# e.g. -DTORCH_CUDA_ARCH_LIST="8.0+PTX;9.0a" for a binary built here and run on GPUs elsewhere.
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0+PTX")
  find_program(_nvidia_smi nvidia-smi NO_CACHE)
  if(_nvidia_smi)
    execute_process(COMMAND "${_nvidia_smi}" --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE _gpu_caps RESULT_VARIABLE _smi_rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    string(REGEX MATCHALL "[0-9]+\\.[0-9]+" _gpu_caps "${_gpu_caps}")
    if(_smi_rc EQUAL 0 AND _gpu_caps)
      list(REMOVE_DUPLICATES _gpu_caps)
      list(TRANSFORM _gpu_caps REPLACE "^9\\.0$" "9.0a")
      set(TORCH_CUDA_ARCH_LIST "${_gpu_caps}")
    endif()
  endif()
  message(STATUS "nanochat: CUDA kernels for ${TORCH_CUDA_ARCH_LIST} (set TORCH_CUDA_ARCH_LIST for others)")
endif()
# nvcc for LibTorch's enable_language(CUDA) when it is not on PATH (unused without CUDA)
if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
# Without a CUDA toolkit (a laptop, a CPU server with PyPI's default torch wheel, which has CUDA)
# LibTorch's CMake config stops: it looks for nvcc. The wheel carries its own CUDA runtime
# (site-packages/nvidia/cu*/), which then stands in for the toolkit's (the config skips its CUDA
# search when torch::cudart exists), and only our CUDA kernels are left out: the fused ops run
# their ATen references on a GPU (src/kernels/dispatch.cpp says so once at run time).
set(NANOCHAT_NVCC "")
foreach(candidate "${CMAKE_CUDA_COMPILER}" "$ENV{CUDACXX}" nvcc)
  if(candidate AND NOT NANOCHAT_NVCC)
    find_program(_nvcc_path NAMES "${candidate}" NO_CACHE)
    if(_nvcc_path)
      execute_process(COMMAND "${_nvcc_path}" --version RESULT_VARIABLE _nvcc_rc OUTPUT_QUIET ERROR_QUIET)
      if(_nvcc_rc EQUAL 0)
        set(NANOCHAT_NVCC "${_nvcc_path}")
      endif()
    endif()
  endif()
endforeach()
# The toolkit must be of LibTorch's CUDA major: our kernels link the CUDA runtime LibTorch loads,
# and a toolkit of another major would bring a second one (or kernels its runtime cannot load).
# Another major is not used, with one line: the fused ops then run their ATen references.
# LibTorch's CUDA: the wheel's torch/version.py (cuda = '13.0'), a zip's build-version (+cu130).
set(NANOCHAT_TORCH_CUDA "")
foreach(prefix ${CMAKE_PREFIX_PATH})
  if(NOT NANOCHAT_TORCH_CUDA AND EXISTS "${prefix}/../../version.py")
    file(STRINGS "${prefix}/../../version.py" _line REGEX "^cuda")
    if(_line MATCHES "'([0-9]+\\.[0-9]+)'")
      set(NANOCHAT_TORCH_CUDA "${CMAKE_MATCH_1}")
    endif()
  elseif(NOT NANOCHAT_TORCH_CUDA AND EXISTS "${prefix}/build-version")
    file(READ "${prefix}/build-version" _line)
    if(_line MATCHES "\\+cu([0-9]+)([0-9])")
      set(NANOCHAT_TORCH_CUDA "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
    endif()
  endif()
endforeach()
if(NANOCHAT_NVCC AND NANOCHAT_TORCH_CUDA)
  execute_process(COMMAND "${NANOCHAT_NVCC}" --version OUTPUT_VARIABLE _nvcc_out ERROR_QUIET)
  string(REGEX MATCH "release ([0-9]+)\\.([0-9]+)" _nvcc_release "${_nvcc_out}")
  set(_nvcc_major "${CMAKE_MATCH_1}")
  set(_nvcc_version "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
  string(REGEX MATCH "^[0-9]+" _torch_major "${NANOCHAT_TORCH_CUDA}")
  if(_nvcc_release AND NOT _nvcc_major STREQUAL _torch_major)
    message(STATUS "nanochat: ${NANOCHAT_NVCC} is CUDA ${_nvcc_version}, LibTorch's is CUDA ${NANOCHAT_TORCH_CUDA}: "
                   "not used, the CUDA kernels of the fused ops are left out (install a CUDA ${_torch_major} "
                   "toolkit, or point CUDACXX at one)")
    set(NANOCHAT_NVCC "")
    set(_nvcc_said_why ON)
    unset(CMAKE_CUDA_COMPILER)
    unset(CMAKE_CUDA_COMPILER CACHE)
  endif()
endif()
if(NOT NANOCHAT_NVCC)
  foreach(prefix ${CMAKE_PREFIX_PATH})  # the wheel's torch/share/cmake: nvidia/ is beside torch/
    file(GLOB _wheel_cudart "${prefix}/../../../nvidia/cu[0-9]*/lib/libcudart.so.*")
    if(_wheel_cudart)
      break()
    endif()
  endforeach()
  if(_wheel_cudart)
    list(GET _wheel_cudart 0 _wheel_cudart)
    get_filename_component(_wheel_cudart "${_wheel_cudart}" REALPATH)
    get_filename_component(_wheel_cuda "${_wheel_cudart}/../.." REALPATH)
    add_library(torch::cudart INTERFACE IMPORTED)
    set_target_properties(torch::cudart PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_wheel_cuda}/include"
                                                   INTERFACE_LINK_LIBRARIES "${_wheel_cudart}")
  endif()
endif()
# find_package(Torch), its libraries from its own prefix only (libtorch.cmake says why)
include(${CMAKE_CURRENT_LIST_DIR}/libtorch.cmake)
# The oldest version of each dependency the code builds with, checked with one line each
# (docs/building.md has the table: what Debian 12 and Ubuntu 22.04/24.04 ship, and why).
function(nanochat_require_version what have need why)
  if(have AND have VERSION_LESS need)
    # the leading space keeps CMake from wrapping the line
    message(FATAL_ERROR " nanochat: ${what} ${have} is older than ${need}, the oldest nanochat builds with "
                        "(${why}): see docs/building.md")
  endif()
endfunction()
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  nanochat_require_version(g++ "${CMAKE_CXX_COMPILER_VERSION}" 11 "std::from_chars for double")
endif()
find_package(nlohmann_json 3 REQUIRED)
nanochat_require_version(nlohmann-json "${nlohmann_json_VERSION}" 3.10.5 "compiled against 3.10.5 and 3.11.2")
find_package(CLI11 REQUIRED)
nanochat_require_version(CLI11 "${CLI11_VERSION}" 2.1.2 "compiled against 2.1.2 and 2.4.1")
find_package(Threads REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
nanochat_require_version(zstd "${ZSTD_VERSION}" 1.3.0 "ZSTD_getFrameContentSize")
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_package(ZLIB REQUIRED)
find_package(Snappy CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)
nanochat_require_version(OpenSSL "${OPENSSL_VERSION}" 1.1.1 "cpp-httplib's TLS")
include(${CMAKE_CURRENT_LIST_DIR}/httplib.cmake)  # the system's, or its pinned release where older
# the CORE eval bundle: a zip (libzip) holding core.yaml (yaml-cpp)
# (pkg-config for libzip: Debian's CMake config insists on the zipcmp tools of another package)
pkg_check_modules(LIBZIP REQUIRED IMPORTED_TARGET libzip)
find_package(yaml-cpp CONFIG REQUIRED)
if(TARGET yaml-cpp::yaml-cpp)  # 0.8 (Ubuntu 24.04) names it so; `yaml-cpp` is its deprecated alias
  set(_yaml_cpp yaml-cpp::yaml-cpp)
else()
  set(_yaml_cpp yaml-cpp)
endif()
pkg_check_modules(SECCOMP REQUIRED IMPORTED_TARGET libseccomp)  # the code sandbox's syscall filter
nanochat_require_version(libseccomp "${SECCOMP_VERSION}" 2.4.0 "SCMP_ACT_KILL_PROCESS")

# ProcessGroupGloo.hpp includes gloo headers, which the torch wheel does not ship; Debian's
# libgloo-dev provides them (headers only: the Gloo code itself is inside libtorch_cpu).
find_path(GLOO_INCLUDE_DIR gloo/algorithm.h HINTS "$ENV{GLOO_INCLUDE_DIR}")
if(NOT GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "gloo headers not found: apt-get install libgloo-dev (or set GLOO_INCLUDE_DIR)")
endif()

add_library(nanochat_deps INTERFACE)
target_link_libraries(nanochat_deps INTERFACE ${TORCH_LIBRARIES} nlohmann_json::nlohmann_json
                      PkgConfig::ZSTD PkgConfig::PCRE2 ZLIB::ZLIB Snappy::snappy nanochat_httplib
                      OpenSSL::SSL OpenSSL::Crypto PkgConfig::LIBZIP ${_yaml_cpp} PkgConfig::SECCOMP Threads::Threads
                      ${CMAKE_DL_LIBS})
target_include_directories(nanochat_deps SYSTEM INTERFACE ${GLOO_INCLUDE_DIR})

# OpenMP: at::parallel_for is a header template whose `#pragma omp parallel` a file compiled
# without -fopenmp silently drops, so our CPU kernels ran on one thread. The files that call
# it build with -fopenmp (CMakeLists.txt) and link the OpenMP runtime LibTorch itself loads
# (the wheel's libgomp.so.1): one runtime in the process, one thread count.
find_library(NANOCHAT_GOMP NAMES libgomp.so.1 gomp HINTS "${TORCH_INSTALL_PREFIX}/lib" NO_DEFAULT_PATH)
if(NANOCHAT_GOMP)
  target_link_libraries(nanochat_deps INTERFACE ${NANOCHAT_GOMP})
else()
  find_package(OpenMP REQUIRED)
  target_link_libraries(nanochat_deps INTERFACE OpenMP::OpenMP_CXX)
endif()
target_compile_definitions(nanochat_deps INTERFACE USE_C10D_GLOO)

# CUDA and NCCL code is built whenever the LibTorch found has CUDA, GPU or not: at run time
# the binary uses CUDA only when torch::cuda::is_available().
set(NANOCHAT_HAS_CUDA OFF)
set(NANOCHAT_CUDA_KERNELS OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(NANOCHAT_HAS_CUDA ON)
  if(NANOCHAT_NVCC)
    find_package(CUDAToolkit REQUIRED)
    # our .cu files: C++17, and the shared CUDA runtime that LibTorch itself uses (a static one
    # beside it would be a second runtime in the process)
    enable_language(CUDA)  # LibTorch's config has done it already; this says that we need it
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    set(_cuda_runtime CUDA::cudart)
    set(NANOCHAT_CUDA_KERNELS ON)  # the fused ops' CUDA kernels (src/kernels/*.cu)
  else()
    set(_cuda_runtime torch::cudart)
    if(NOT _nvcc_said_why)
      message(STATUS "nanochat: no nvcc found: the CUDA kernels of the fused ops are left out (on a GPU the ops "
                     "run their ATen references); install the CUDA toolkit for them")
    endif()
  endif()
  # nccl.h: the one shipped with the wheel (nvidia-nccl) matches the NCCL torch loads
  find_path(NCCL_INCLUDE_DIR nccl.h
            HINTS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include" "$ENV{NCCL_INCLUDE_DIR}" "${CUDAToolkit_INCLUDE_DIRS}")
  if(NOT NCCL_INCLUDE_DIR)
    message(FATAL_ERROR "nccl.h not found: install NCCL (or set NCCL_INCLUDE_DIR)")
  endif()
  target_include_directories(nanochat_deps SYSTEM INTERFACE ${NCCL_INCLUDE_DIR})
  target_link_libraries(nanochat_deps INTERFACE ${_cuda_runtime})
  target_compile_definitions(nanochat_deps INTERFACE NANOCHAT_CUDA USE_C10D_NCCL)
endif()
message(STATUS "nanochat: LibTorch ${Torch_VERSION} at ${TORCH_INSTALL_PREFIX}, CUDA ${NANOCHAT_HAS_CUDA}, "
               "CUDA kernels ${NANOCHAT_CUDA_KERNELS}")
