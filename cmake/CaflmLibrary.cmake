# How caflm's own targets are built.

# caflm_build_flags(TARGET) gives a target of this project the warnings and
# optimisation flags of caflm's own build. They are PRIVATE: a project that
# consumes the installed library compiles its code with its own flags.
# C++ sources get them as GCC/Clang options; CUDA sources get them in the
# spelling nvcc accepts: the host compiler's warnings through -Xcompiler (not
# -Wpedantic: nvcc's generated host code uses GNU line markers), and nvcc's
# own warnings made errors with --Werror=all-warnings.
function(caflm_build_flags target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${CAFLM_WERROR}>>:-Werror>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU,Clang>,$<NOT:$<CONFIG:Debug>>>:-O2 -march=x86-64-v3 -mtune=native>)
  if(CAFLM_HAVE_CUDA)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>
      $<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<BOOL:${CAFLM_WERROR}>>:--Werror=all-warnings -Xcompiler=-Werror>)
    # No -O here: CMake's CUDA flags for the build type already carry one,
    # and nvcc warns when a second one redefines it.
  endif()
endfunction()

# caflm_layer_library(NAME DEPS...) builds every .cpp (and, in a CUDA build,
# .cu) of the calling folder, one layer of the library, into the static
# library NAME, installed and exported as caflm::NAME. Consumers include its
# headers as <caflm/LAYER/...>.
function(caflm_layer_library name)
  set(patterns ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  if(CAFLM_HAVE_CUDA)
    list(APPEND patterns ${CMAKE_CURRENT_SOURCE_DIR}/*.cu)
  endif()
  file(GLOB sources CONFIGURE_DEPENDS ${patterns})
  add_library(${name} STATIC ${sources})
  add_library(caflm::${name} ALIAS ${name})
  target_link_libraries(${name} PUBLIC ${ARGN})
  target_include_directories(${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${name} PUBLIC cxx_std_17)
  caflm_build_flags(${name})
  set_property(GLOBAL APPEND PROPERTY CAFLM_LIBRARY_TARGETS ${name})
endfunction()
