# cpp-httplib: the system's (libcpp-httplib-dev) when it is at least NANOCHAT_HTTPLIB_MIN, else
# the pinned release fetched by URL and checked by SHA256 (Ubuntu 22.04 ships 0.10.3). Gives the
# target nanochat_httplib.
#
# 0.11.4 is the oldest the code builds with: the server's socket stream overrides
# httplib::Stream::get_local_ip_and_port, which 0.11.4 added (0.11.0 to 0.11.3 and 0.10.3 fail to
# compile; checked against each release's httplib.h). It is also what Debian 12 ships and the
# version the server's hardening tests were written against.
# The SHA256 is that of GitHub's archive of the tag (`git archive --prefix=cpp-httplib-0.11.4/
# v0.11.4 | gzip -n -6`, the same recipe whose v0.12.5 hash Spack's cpp-httplib package lists).
# NANOCHAT_HTTPLIB_URL / _SHA256 point it elsewhere (a mirror, or the local archive
# tests/cmake_fetch_httplib uses).
set(NANOCHAT_HTTPLIB_MIN 0.11.4)
set(NANOCHAT_HTTPLIB_URL "https://github.com/yhirose/cpp-httplib/archive/refs/tags/v0.11.4.tar.gz"
    CACHE STRING "the cpp-httplib release used when the system's is missing or older than ${NANOCHAT_HTTPLIB_MIN}")
set(NANOCHAT_HTTPLIB_SHA256 "28f76b875a332fb80972c3212980c963f0a7d2e11a8fe94a8ed0d847b9a2256f"
    CACHE STRING "SHA256 of NANOCHAT_HTTPLIB_URL")

find_package(PkgConfig REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(ZLIB REQUIRED)
pkg_check_modules(HTTPLIB QUIET IMPORTED_TARGET cpp-httplib)
add_library(nanochat_httplib INTERFACE)
if(HTTPLIB_FOUND AND NOT HTTPLIB_VERSION VERSION_LESS NANOCHAT_HTTPLIB_MIN)
  # Debian's is built with OpenSSL (its .pc says -DCPPHTTPLIB_OPENSSL_SUPPORT)
  target_link_libraries(nanochat_httplib INTERFACE PkgConfig::HTTPLIB OpenSSL::SSL OpenSSL::Crypto)
else()
  if(HTTPLIB_FOUND)
    set(_why "the system's cpp-httplib is ${HTTPLIB_VERSION}, older than ${NANOCHAT_HTTPLIB_MIN}")
  else()
    set(_why "no system cpp-httplib (libcpp-httplib-dev)")
  endif()
  message(STATUS "nanochat: ${_why}: using ${NANOCHAT_HTTPLIB_URL}")
  include(FetchContent)
  if(POLICY CMP0135)
    cmake_policy(SET CMP0135 NEW)  # extracted files get the extraction time (CMake >= 3.24 asks)
  endif()
  # SOURCE_SUBDIR names a folder without a CMakeLists.txt: only the header is wanted, not
  # httplib's own build
  FetchContent_Declare(nanochat_cpp_httplib URL "${NANOCHAT_HTTPLIB_URL}"
                       URL_HASH SHA256=${NANOCHAT_HTTPLIB_SHA256} SOURCE_SUBDIR header-only)
  FetchContent_MakeAvailable(nanochat_cpp_httplib)
  if(NOT EXISTS "${nanochat_cpp_httplib_SOURCE_DIR}/httplib.h")
    message(FATAL_ERROR "${NANOCHAT_HTTPLIB_URL} has no httplib.h at its top")
  endif()
  # the release's httplib.h is header-only: the same features Debian's library is built with
  target_include_directories(nanochat_httplib SYSTEM INTERFACE "${nanochat_cpp_httplib_SOURCE_DIR}")
  target_compile_definitions(nanochat_httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT CPPHTTPLIB_ZLIB_SUPPORT)
  target_link_libraries(nanochat_httplib INTERFACE OpenSSL::SSL OpenSSL::Crypto ZLIB::ZLIB)
endif()
