# sandboxd_add_plugin(<module> SOURCES <files...> [VERSION <x.y.z>] [OUTPUT_DIRECTORY <dir>])
# Builds a loadable plugin module named <module>.so, the name a `use: "<module>:Class"`
# string refers to. VERSION (default: the calling project's PROJECT_VERSION, if it has one) is
# recorded in the plugin's metadata: `sandboxctl plugins` shows it and load errors name it.
function(sandboxd_add_plugin module)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY;VERSION" "SOURCES" ${ARGN})
  add_library(${module} MODULE ${ARG_SOURCES})
  target_link_libraries(${module} PRIVATE sandboxd::sdk)
  if(NOT ARG_VERSION)
    set(ARG_VERSION "${PROJECT_VERSION}")
  endif()
  if(ARG_VERSION)
    target_compile_definitions(${module} PRIVATE SANDBOXD_PLUGIN_VERSION="${ARG_VERSION}")
  endif()
  # Default symbol visibility: exception types from the SDK must match across libraries.
  set_target_properties(${module} PROPERTIES PREFIX "")
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${module} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  endif()
endfunction()
