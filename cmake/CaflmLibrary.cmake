# caflm_layer_library(NAME DEPS...) builds every .cpp of the calling folder
# into one static library; a folder with no sources yet gives an interface
# library so later layers can already link against it.
function(caflm_layer_library name)
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  if(sources)
    add_library(${name} STATIC ${sources})
    target_link_libraries(${name} PUBLIC caflm_options ${ARGN})
  else()
    add_library(${name} INTERFACE)
    target_link_libraries(${name} INTERFACE caflm_options ${ARGN})
  endif()
endfunction()
