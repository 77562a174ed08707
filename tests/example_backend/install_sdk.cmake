# Installs the whole sandboxd build into a fresh prefix, the way a packager would, and checks
# that the SDK a third party needs (headers + CMake package) is in it.
#   cmake -DBINARY_DIR=<sandboxd build> -DPREFIX=<prefix> -P install_sdk.cmake
foreach(var BINARY_DIR PREFIX)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "install_sdk.cmake: pass -D${var}=...")
  endif()
endforeach()

file(REMOVE_RECURSE "${PREFIX}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --prefix "${PREFIX}"
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BINARY_DIR} --prefix ${PREFIX} failed (${result})")
endif()

foreach(header sdk.hpp backend.hpp plugin.hpp plugin_config.hpp types.hpp)
  if(NOT EXISTS "${PREFIX}/include/sandboxd/${header}")
    message(FATAL_ERROR "the install lacks ${PREFIX}/include/sandboxd/${header}")
  endif()
endforeach()
file(GLOB_RECURSE configs "${PREFIX}/*/sandboxdConfig.cmake")
file(GLOB_RECURSE add_plugin "${PREFIX}/*/sandboxd_add_plugin.cmake")
if(NOT configs OR NOT add_plugin)
  message(FATAL_ERROR "the install lacks the sandboxd CMake package (sandboxdConfig.cmake, "
                      "sandboxd_add_plugin.cmake) under ${PREFIX}")
endif()
file(GLOB_RECURSE core_libraries "${PREFIX}/*/libsandboxd_core.so.*")
file(GLOB_RECURSE core_targets "${PREFIX}/*/sandboxdCoreTargets.cmake")
file(GLOB_RECURSE core_pc "${PREFIX}/*/sandboxd-core.pc")
if(NOT core_libraries OR NOT core_targets OR NOT core_pc
   OR NOT EXISTS "${PREFIX}/include/sandboxd/core/provider.hpp")
  message(FATAL_ERROR "the install lacks the core (libsandboxd_core.so.*, "
                      "sandboxdCoreTargets.cmake, sandboxd-core.pc, sandboxd/core/*.hpp) under "
                      "${PREFIX}")
endif()
message(STATUS "sandboxd installed into ${PREFIX}: ${configs}")

# The SDK alone, as a plugin author installs it (README): component "sdk" into its own prefix
# holds the headers and the CMake package, and nothing of the core.
set(sdk_prefix "${PREFIX}-sdk-only")
file(REMOVE_RECURSE "${sdk_prefix}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" --install "${BINARY_DIR}" --component sdk --prefix "${sdk_prefix}"
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "cmake --install ${BINARY_DIR} --component sdk failed (${result})")
endif()
file(GLOB_RECURSE sdk_configs "${sdk_prefix}/*/sandboxdConfig.cmake")
file(GLOB_RECURSE sdk_core "${sdk_prefix}/*/libsandboxd_core.so*")
if(NOT EXISTS "${sdk_prefix}/include/sandboxd/backend.hpp" OR NOT sdk_configs OR sdk_core)
  message(FATAL_ERROR "--component sdk did not install the SDK alone into ${sdk_prefix}")
endif()
file(REMOVE_RECURSE "${sdk_prefix}")
