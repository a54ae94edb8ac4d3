# cairn_cc_library / cairn_cc_test / cairn_cc_binary / cairn_cc_benchmark,
# modelled on abseil's absl_cc_library: NAME x makes target cairn_x with the alias cairn::x.

# Flags shared by every first-party target (linked PRIVATE).
add_library(cairn_build_flags INTERFACE)
add_library(cairn::build_flags ALIAS cairn_build_flags)
target_compile_options(cairn_build_flags INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Woverloaded-virtual
  -Wimplicit-fallthrough)
if(CAIRN_WERROR)
  target_compile_options(cairn_build_flags INTERFACE -Werror)
  # GCC 12 at -O3 (the hip-nvidia preset) reports a bogus -Wrestrict inside libstdc++'s
  # inlined std::string copies (char_traits.h; GCC bug 105329, fixed in GCC 13): it stays a
  # warning there rather than failing the build.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(cairn_build_flags INTERFACE -Wno-error=restrict)
  endif()
endif()
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  target_compile_options(cairn_build_flags INTERFACE -Wthread-safety)
endif()
# Repository-rooted includes: "common/status/status_macros.h".
target_include_directories(cairn_build_flags INTERFACE ${PROJECT_SOURCE_DIR})

if(CAIRN_SANITIZE)
  add_compile_options(-fsanitize=${CAIRN_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${CAIRN_SANITIZE})
  if(CAIRN_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=undefined)
  endif()
endif()

# The fuzz build (preset `fuzz`): every object carries libFuzzer's coverage instrumentation;
# only the fuzz targets link the libFuzzer engine (tests/fuzz/CMakeLists.txt).
if(CAIRN_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "CAIRN_BUILD_FUZZERS needs Clang (libFuzzer): use the fuzz preset")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# cairn_cc_library(NAME n [HDRS ...] [SRCS ...] [DEPS ...] [PUBLIC_DEFINES ...])
# Header-only when SRCS is empty.
function(cairn_cc_library)
  cmake_parse_arguments(CC "" "NAME" "HDRS;SRCS;DEPS;PUBLIC_DEFINES" ${ARGN})
  set(target cairn_${CC_NAME})
  if(CC_SRCS)
    add_library(${target} STATIC ${CC_SRCS} ${CC_HDRS})
    target_link_libraries(${target} PUBLIC ${CC_DEPS} PRIVATE cairn::build_flags)
    target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
    if(CC_PUBLIC_DEFINES)
      target_compile_definitions(${target} PUBLIC ${CC_PUBLIC_DEFINES})
    endif()
  else()
    add_library(${target} INTERFACE)
    target_link_libraries(${target} INTERFACE ${CC_DEPS})
    target_include_directories(${target} INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  endif()
  add_library(cairn::${CC_NAME} ALIAS ${target})
endfunction()

# cairn_cc_binary(NAME output-name SRCS ... DEPS ...)
function(cairn_cc_binary)
  cmake_parse_arguments(CC "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${CC_NAME} ${CC_SRCS})
  target_link_libraries(${CC_NAME} PRIVATE ${CC_DEPS} cairn::build_flags)
endfunction()

# cairn_cc_test(NAME n SRCS ... DEPS ... [LABELS unit|integration|gpu ...] [TIMEOUT s])
# Links GoogleTest's main unless a DEPS entry provides one.
function(cairn_cc_test)
  if(NOT CAIRN_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(CC "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  if(NOT CC_LABELS)
    set(CC_LABELS unit)
  endif()
  if(NOT CC_TIMEOUT)
    set(CC_TIMEOUT 300)
  endif()
  set(target cairn_${CC_NAME})
  add_executable(${target} ${CC_SRCS})
  target_link_libraries(${target} PRIVATE ${CC_DEPS} GTest::gmock GTest::gtest_main
                        cairn::build_flags)
  gtest_discover_tests(${target}
    DISCOVERY_TIMEOUT 60
    PROPERTIES LABELS "${CC_LABELS}" TIMEOUT ${CC_TIMEOUT}
               ENVIRONMENT "CAIRN_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()

# cairn_cc_benchmark(NAME n SRCS ... DEPS ...): a Google Benchmark binary, never a test.
function(cairn_cc_benchmark)
  if(NOT CAIRN_BUILD_BENCHMARKS)
    return()
  endif()
  cmake_parse_arguments(CC "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(cairn_${CC_NAME} ${CC_SRCS})
  target_link_libraries(cairn_${CC_NAME} PRIVATE ${CC_DEPS} benchmark::benchmark_main
                        cairn::build_flags)
endfunction()
