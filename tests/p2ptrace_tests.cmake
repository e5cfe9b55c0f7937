# How a test is added and named. Every ctest name of a GoogleTest program comes from here, so that a
# name says where the test lives: the prefix is the test file's folder relative to tests/, with
# `integration` (the group names what a test drives) and sim's `tests` (the sim names what is tested)
# left out, '/' turned into '.', and a trailing '.':
#   tests/unit/core/nccl_log_test.cc      -> unit.core.
#   tests/integration/nccl/x_test.cc      -> nccl.
#   tests/sim/tests/x_test.cc             -> sim.
#   tests/sim/cuda/cuda_sim_test.cc       -> sim.cuda.
include_guard(GLOBAL)
include(GoogleTest)

# p2ptrace_test_prefix(<var> <file>): <file>'s prefix (a path relative to the current source folder,
# or absolute) into <var>.
function(p2ptrace_test_prefix var file)
  get_filename_component(abs "${file}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  file(RELATIVE_PATH rel "${PROJECT_SOURCE_DIR}/tests" "${abs}")
  get_filename_component(dir "${rel}" DIRECTORY)
  string(REGEX REPLACE "^integration(/|$)" "" dir "${dir}")
  string(REGEX REPLACE "^sim/tests(/|$)" "sim\\1" dir "${dir}")
  if(dir STREQUAL "" OR dir MATCHES "^\\.\\.")
    message(FATAL_ERROR "${file}: a test must live in a folder of tests/ (its folder names its tests)")
  endif()
  string(REPLACE "/" "." dir "${dir}")
  set(${var} "${dir}." PARENT_SCOPE)
endfunction()

# p2ptrace_add_gtest(<source> [SOURCES <file>...] [LIBS <lib>...] [INCLUDES <dir>...] [DEFINES <def>...]
#                    [DEPENDS <target>...] [PROPERTIES <name> <value>...]
#                    [NO_PRETTY_VALUES] [PRE_TEST] [NO_DISCOVERY])
# A GoogleTest program named after <source> (its file name less the extension, so test file names are
# unique across tests/), linked to gtest_main, with the repository root on its include path; its
# cases are ctest's <prefix><Suite>.<Case>. PROPERTIES go to every case; PRE_TEST lists the cases
# when ctest runs rather than when the program is built (cases made from fixture files);
# NO_DISCOVERY builds the program only, for add_test entries of its own, named with
# p2ptrace_test_prefix.
function(p2ptrace_add_gtest source)
  cmake_parse_arguments(PARSE_ARGV 1 arg "NO_PRETTY_VALUES;PRE_TEST;NO_DISCOVERY" ""
                        "SOURCES;LIBS;INCLUDES;DEFINES;DEPENDS;PROPERTIES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "p2ptrace_add_gtest(${source}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  get_filename_component(target "${source}" NAME_WE)
  add_executable(${target} ${source} ${arg_SOURCES})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR} ${arg_INCLUDES})
  target_link_libraries(${target} PRIVATE ${arg_LIBS} GTest::gtest_main)
  if(arg_DEFINES)
    target_compile_definitions(${target} PRIVATE ${arg_DEFINES})
  endif()
  if(arg_DEPENDS)
    add_dependencies(${target} ${arg_DEPENDS})
  endif()
  if(arg_NO_DISCOVERY)
    return()
  endif()
  p2ptrace_test_prefix(prefix "${source}")
  set(options)
  if(arg_NO_PRETTY_VALUES)
    list(APPEND options NO_PRETTY_VALUES)
  endif()
  if(arg_PRE_TEST)
    list(APPEND options DISCOVERY_MODE PRE_TEST)
  endif()
  if(arg_PROPERTIES)
    list(APPEND options PROPERTIES ${arg_PROPERTIES})
  endif()
  gtest_discover_tests(${target} TEST_PREFIX ${prefix} ${options})
endfunction()
