# cJSON (safetensors headers, model configs, tuning cache, probe JSON). Sets FP4KIT_CJSON, the target
# that tests and the command link for the header and symbols, and FP4KIT_CJSON_BUNDLED:
#   OFF  the system's cJSON (pkg-config libcjson, else cjson/cJSON.h and libcjson; CMAKE_PREFIX_PATH
#        is searched too), linked privately;
#   ON   cJSON's own source compiled into libfp4kit (symbols hidden in the shared library): from
#        FP4KIT_CJSON_SOURCE_DIR (a directory with cJSON.c and cJSON.h), else .deps/cjson-src
#        (scripts/fetch_deps.sh), else fetched at configure time by scripts/fetch_deps.sh into the
#        build tree when FP4KIT_FETCH_CJSON is ON (the default; it uses apt's configured archive).
# FP4KIT_BUNDLE_CJSON=ON skips the system's cJSON (self-contained wheels). When nothing works the
# configure step stops with one line saying what to install.
option(FP4KIT_BUNDLE_CJSON "Compile cJSON's source into libfp4kit instead of linking the system's" OFF)
option(FP4KIT_FETCH_CJSON "Fetch cJSON's source with scripts/fetch_deps.sh when no cJSON is found" ON)
set(FP4KIT_CJSON_SOURCE_DIR "" CACHE PATH "A directory holding cJSON.c and cJSON.h to compile into libfp4kit")

set(FP4KIT_CJSON_BUNDLED OFF)
if(NOT FP4KIT_BUNDLE_CJSON AND NOT FP4KIT_CJSON_SOURCE_DIR)
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(CJSON IMPORTED_TARGET libcjson)
  endif()
  if(NOT TARGET PkgConfig::CJSON)
    # No pkg-config (or no .pc file): look for the header and library directly, same target name.
    find_path(FP4KIT_CJSON_INCLUDE_DIR cjson/cJSON.h)
    find_library(FP4KIT_CJSON_LIBRARY cjson)
    if(FP4KIT_CJSON_INCLUDE_DIR AND FP4KIT_CJSON_LIBRARY)
      add_library(PkgConfig::CJSON INTERFACE IMPORTED)
      target_include_directories(PkgConfig::CJSON INTERFACE ${FP4KIT_CJSON_INCLUDE_DIR})
      target_link_libraries(PkgConfig::CJSON INTERFACE ${FP4KIT_CJSON_LIBRARY})
    endif()
  endif()
endif()

if(TARGET PkgConfig::CJSON)
  set(FP4KIT_CJSON PkgConfig::CJSON)
  message(STATUS "fp4kit: cJSON: the system's")
else()
  set(_fp4kit_cjson_src "")
  foreach(dir IN ITEMS "${FP4KIT_CJSON_SOURCE_DIR}" "${PROJECT_SOURCE_DIR}/.deps/cjson-src"
                       "${PROJECT_BINARY_DIR}/_deps/cjson-src")
    if(dir AND EXISTS "${dir}/cJSON.c" AND EXISTS "${dir}/cJSON.h")
      set(_fp4kit_cjson_src "${dir}")
      break()
    endif()
  endforeach()
  if(NOT _fp4kit_cjson_src AND FP4KIT_CJSON_SOURCE_DIR)
    message(FATAL_ERROR "fp4kit: FP4KIT_CJSON_SOURCE_DIR=${FP4KIT_CJSON_SOURCE_DIR} holds no cJSON.c and cJSON.h")
  endif()
  if(NOT _fp4kit_cjson_src AND FP4KIT_FETCH_CJSON)
    message(STATUS "fp4kit: fetching cJSON's source (scripts/fetch_deps.sh; FP4KIT_FETCH_CJSON=OFF stops this)")
    execute_process(COMMAND bash "${PROJECT_SOURCE_DIR}/scripts/fetch_deps.sh" "${PROJECT_BINARY_DIR}/_deps"
      RESULT_VARIABLE _fp4kit_fetch_rc)
    if(_fp4kit_fetch_rc EQUAL 0)
      set(_fp4kit_cjson_src "${PROJECT_BINARY_DIR}/_deps/cjson-src")
    endif()
  endif()
  if(NOT _fp4kit_cjson_src)
    # One line (CMake wraps FATAL_ERROR text, not NOTICE), also in pip's output: what to install.
    message(NOTICE "fp4kit needs cJSON: install it (apt-get install libcjson-dev, dnf install cjson-devel, or conda install -c conda-forge cjson), or put its source in .deps/cjson-src with `bash scripts/fetch_deps.sh`, or pass -DFP4KIT_CJSON_SOURCE_DIR=<dir with cJSON.c and cJSON.h>")
    message(FATAL_ERROR "fp4kit: no cJSON found (the line above says what to install)")
  endif()
  # The code includes <cjson/cJSON.h>: the header is copied under that name.
  configure_file("${_fp4kit_cjson_src}/cJSON.h" "${PROJECT_BINARY_DIR}/cjson-include/cjson/cJSON.h" COPYONLY)
  add_library(fp4kit_cjson OBJECT "${_fp4kit_cjson_src}/cJSON.c")
  target_include_directories(fp4kit_cjson PUBLIC $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/cjson-include>)
  set(FP4KIT_CJSON fp4kit_cjson)
  set(FP4KIT_CJSON_BUNDLED ON)
  set(_fp4kit_cjson_version "")
  if(EXISTS "${_fp4kit_cjson_src}/VERSION")
    file(READ "${_fp4kit_cjson_src}/VERSION" _fp4kit_cjson_version LIMIT 64)
    string(STRIP "${_fp4kit_cjson_version}" _fp4kit_cjson_version)
  endif()
  message(STATUS "fp4kit: cJSON ${_fp4kit_cjson_version}: compiled into libfp4kit from ${_fp4kit_cjson_src}")
endif()
