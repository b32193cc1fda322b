# runtime_safetensors_fuzz_asan: the safetensors fuzz test built with AddressSanitizer and
# UndefinedBehaviorSanitizer. The reader's sources are compiled into the executable
# (not linked from olmo2_runtime / olmo2_ops) so that every line it runs is instrumented.
# Included from tests/io/CMakeLists.txt.
include(CheckCXXSourceCompiles)

set(OLMO2_SANITIZE_FLAGS
  -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1)

# Skip, saying why, on a toolchain without the sanitizer runtimes (libasan, libubsan).
set(CMAKE_REQUIRED_FLAGS "-fsanitize=address,undefined")
set(CMAKE_REQUIRED_LINK_OPTIONS "-fsanitize=address,undefined")
check_cxx_source_compiles("int main() { return 0; }" OLMO2_HAVE_ASAN_UBSAN)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)

if(NOT OLMO2_HAVE_ASAN_UBSAN)
  message(STATUS "olmo2: ${CMAKE_CXX_COMPILER} cannot build with -fsanitize=address,undefined; "
                 "runtime_safetensors_fuzz_asan is not built")
  return()
endif()

add_executable(runtime_safetensors_fuzz_asan
  ${CMAKE_CURRENT_LIST_DIR}/test_safetensors_fuzz.cpp
  ${CMAKE_SOURCE_DIR}/runtime/io/safetensors.cpp
  ${CMAKE_SOURCE_DIR}/runtime/io/mapped_file.cpp
  ${CMAKE_SOURCE_DIR}/ops/dtype.cpp
  ${CMAKE_SOURCE_DIR}/ops/tensor.cpp
  ${CMAKE_SOURCE_DIR}/ops/device_emulation.cpp)
# -O1 comes after the build type's -O2/-O3 on the command line, so it wins.
target_compile_options(runtime_safetensors_fuzz_asan PRIVATE ${OLMO2_SANITIZE_FLAGS})
target_link_options(runtime_safetensors_fuzz_asan PRIVATE ${OLMO2_SANITIZE_FLAGS})
target_include_directories(runtime_safetensors_fuzz_asan PRIVATE ${CMAKE_SOURCE_DIR})
# No OLMO2_HAVE_CUDA: tensor.cpp then builds its CPU-only allocator.
target_compile_definitions(runtime_safetensors_fuzz_asan PRIVATE
  OLMO2_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
  OLMO2_BINARY="$<TARGET_FILE:olmo2>")
target_link_libraries(runtime_safetensors_fuzz_asan PRIVATE
  GTest::gtest_main GTest::gmock nlohmann_json::nlohmann_json OpenMP::OpenMP_CXX)

# Plain add_test: discovery would run the binary at build time, before ctest sets the
# sanitizer options.
add_test(NAME runtime_safetensors_fuzz_asan COMMAND runtime_safetensors_fuzz_asan)
set_tests_properties(runtime_safetensors_fuzz_asan PROPERTIES
  LABELS unit
  ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1;UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
