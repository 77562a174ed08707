# sandboxd_add_plugin(<module> SOURCES <files...> [OUTPUT_DIRECTORY <dir>])
# Builds a loadable plugin module named <module>.so, the name a `use: "<module>:Class"`
# string refers to.
function(sandboxd_add_plugin module)
  cmake_parse_arguments(ARG "" "OUTPUT_DIRECTORY" "SOURCES" ${ARGN})
  add_library(${module} MODULE ${ARG_SOURCES})
  target_link_libraries(${module} PRIVATE sandboxd::sdk)
  # Default symbol visibility: exception types from the SDK must match across libraries.
  set_target_properties(${module} PROPERTIES PREFIX "")
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${module} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${ARG_OUTPUT_DIRECTORY})
  endif()
endfunction()
