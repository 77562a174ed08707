# Configures and builds the example third-party plugin from scratch against the installed SDK
# only, with warnings as errors, and checks that find_package really used that install.
#   cmake -DSOURCE_DIR=... -DOUT_DIR=... -DPREFIX=... [-DGENERATOR=...] [-DCXX_COMPILER=...]
#         [-DBUILD_TYPE=...] [-DEXPECT=file the build must produce] -P build_out_of_tree.cmake
foreach(var SOURCE_DIR OUT_DIR PREFIX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "build_out_of_tree.cmake: pass -D${var}=...")
  endif()
endforeach()

file(REMOVE_RECURSE "${OUT_DIR}")
set(configure_args
  -S "${SOURCE_DIR}" -B "${OUT_DIR}"
  "-DCMAKE_PREFIX_PATH=${PREFIX}"
  "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Werror"
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(GENERATOR)
  list(APPEND configure_args -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" ${configure_args} RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "configuring ${SOURCE_DIR} against ${PREFIX} failed (${result})")
endif()

# find_package must have taken the package from the prefix, not from anywhere else.
file(STRINGS "${OUT_DIR}/CMakeCache.txt" found_dir REGEX "^sandboxd_DIR:")
string(REGEX REPLACE "^sandboxd_DIR:[A-Z]+=" "" found_dir "${found_dir}")
file(REAL_PATH "${PREFIX}" real_prefix)
file(REAL_PATH "${found_dir}" real_found_dir)
string(FIND "${real_found_dir}" "${real_prefix}/" at)
if(NOT at EQUAL 0)
  message(FATAL_ERROR "find_package(sandboxd) used ${found_dir}, not the install in ${PREFIX}")
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" --build "${OUT_DIR}" RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "building ${SOURCE_DIR} against ${PREFIX} failed (${result})")
endif()
if(NOT EXPECT)
  set(EXPECT process_backend.so)
endif()
if(NOT EXISTS "${OUT_DIR}/${EXPECT}")
  message(FATAL_ERROR "the build did not produce ${OUT_DIR}/${EXPECT}")
endif()
message(STATUS "built ${OUT_DIR}/${EXPECT} against ${found_dir}")
