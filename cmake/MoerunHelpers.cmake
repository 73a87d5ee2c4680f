# One helper per kind of target: libraries get a namespaced alias, tests register with ctest
# (MPI tests through mpirun with the flags a root CI container needs, always with a timeout).

function(moerun_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(moerun_${name} STATIC ${ARG_SOURCES})
  add_library(moerun::${name} ALIAS moerun_${name})
  target_include_directories(moerun_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(moerun_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
endfunction()

set(MOERUN_MPIEXEC_FLAGS --oversubscribe --bind-to none)
set(MOERUN_TEST_ENV "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")

# moerun_add_test(name SOURCES ... [DEPS ...] [MPI_RANKS n] [TIMEOUT s] [LABELS ...] [ENV k=v ...]
#                 [EXECUTABLE target]   (reuse another test's executable with other ranks/env)
function(moerun_add_test name)
  cmake_parse_arguments(ARG "" "MPI_RANKS;TIMEOUT;EXECUTABLE" "SOURCES;DEPS;LABELS;ARGS;ENV" ${ARGN})
  if(ARG_EXECUTABLE)
    set(exe ${ARG_EXECUTABLE})
  else()
    set(exe ${name})
  add_executable(${name} ${ARG_SOURCES})
  # MPI tests bring their own main (MPI_Init around the GoogleTest run).
  if(ARG_MPI_RANKS)
    target_sources(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/mpi_gtest_main.cpp)
    target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest MPI::MPI_C)
  else()
    target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  endif()
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if("unit" IN_LIST ARG_LABELS)
    set_property(GLOBAL APPEND PROPERTY MOERUN_UNIT_TEST_TARGETS ${exe})
  endif()
  if(ARG_MPI_RANKS)
    add_test(NAME ${name} COMMAND ${MPIEXEC_EXECUTABLE} ${MOERUN_MPIEXEC_FLAGS} -np ${ARG_MPI_RANKS}
             $<TARGET_FILE:${exe}> ${ARG_ARGS})
  else()
    add_test(NAME ${name} COMMAND ${exe} ${ARG_ARGS})
  endif()
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT} ENVIRONMENT "${MOERUN_TEST_ENV};${ARG_ENV}"
                       LABELS "${ARG_LABELS}")
  # A test that needs hardware this machine lacks (label gpu) skips itself with GTEST_SKIP and a
  # reason; ctest must then say "Skipped", not "Passed".
  if("gpu" IN_LIST ARG_LABELS)
    set_tests_properties(${name} PROPERTIES SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")
  endif()
endfunction()

# moerun_add_script_test(name COMMAND ... [TIMEOUT s] [LABELS ...]): a test that drives the moerun
# binary (end-to-end, bad input, reference) through a script.
function(moerun_add_script_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  add_test(NAME ${name} COMMAND ${ARG_COMMAND})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT}
                       ENVIRONMENT "${MOERUN_TEST_ENV};MOERUN_BIN=$<TARGET_FILE:moerun>;MPIEXEC=${MPIEXEC_EXECUTABLE};MOERUN_PYTHON=${MOERUN_PYTHON}"
                       LABELS "${ARG_LABELS}")
endfunction()
