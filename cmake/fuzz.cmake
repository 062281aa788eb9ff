# fuzz.cmake: libFuzzer targets (tests/fuzz/fuzz_*.c) and their bounded ctest runs. Clang only.
#
# Included from CMakeLists.txt after the tests. With a clang C compiler it builds
#   fuzz_switch  ina-switch's packet handler (ina__switch_input)
#   fuzz_reply   libina's reply handler (ina__stream_on_datagram)
#   fuzz_ps      ina-ps's input handler (ina__ps_input)
#   fuzz_sched   ina-sched's input handler (ina__sched_input)
# each with -fsanitize=fuzzer,address,undefined, whatever INA_SANITIZE says, linked with
# libraries built from the rooms' sources with the same flags (fuzz_common, fuzz_engine, ...:
# the coverage instrumentation must be in the fuzzed code).
# Each gets a ctest (label "fuzz") that fuzzes for INA_FUZZ_SECONDS over a scratch copy of the
# corpus in the build tree, reading tests/fuzz/corpus/<surface> and
# tests/fuzz/regressions/<surface> (never written), surface = switch or reply. A crash, leak,
# hang or broken invariant fails the test and leaves the input in
# <build>/fuzz-artifacts/<surface>/. With gcc nothing here is built.

set(INA_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzz target runs in ctest (label fuzz)")
set(INA_FUZZ_SEED 1 CACHE STRING "libFuzzer -seed for the ctest runs (fixed: CI replays the same mutations); 0 = random")

if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(STATUS "ina: fuzz targets need clang (C compiler is ${CMAKE_C_COMPILER_ID}); skipped")
  return()
endif()

find_program(INA_BASH bash REQUIRED)
set(INA_FUZZ_DIR ${PROJECT_SOURCE_DIR}/tests/fuzz)
set(INA_FUZZ_FLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
                   -fno-omit-frame-pointer)

# ina_add_fuzzer(<surface> <sources...>): executable <build>/tests/fuzz/fuzz_<surface> and ctest
# fuzz_<surface>, over the corpus tests/fuzz/corpus/<surface>.
function(ina_add_fuzzer surface)
  set(name fuzz_${surface})
  add_executable(${name} ${ARGN})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${INA_TEST_BIN_DIR}/fuzz)
  target_include_directories(${name} PRIVATE ${INA_INTERNAL_INCLUDES})
  target_compile_options(${name} PRIVATE ${INA_FUZZ_FLAGS})
  target_link_options(${name} PRIVATE ${INA_FUZZ_FLAGS})
  target_link_libraries(${name} PRIVATE m Threads::Threads)
  add_test(NAME ${name}
    COMMAND ${INA_BASH} ${INA_FUZZ_DIR}/run-fuzz.sh $<TARGET_FILE:${name}> ${surface}
            ${INA_FUZZ_SECONDS} ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR}
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR})
  # ctest's limit: the fuzzing time, plus replaying the corpus and starting up.
  math(EXPR _timeout "${INA_FUZZ_SECONDS} + 120")
  # A unit's limit of 60 s, not `make fuzz`'s 10: on a loaded host (CI, parallel builds) one
  # input of a few milliseconds was seen waiting 14 s for a CPU; ctest's TIMEOUT still ends a
  # real hang.
  set_tests_properties(${name} PROPERTIES LABELS fuzz TIMEOUT ${_timeout}
                                           ENVIRONMENT "INA_FUZZ_SEED=${INA_FUZZ_SEED};INA_FUZZ_UNIT_TIMEOUT=60")
endfunction()

# What is fuzzed, compiled into libraries of its own: the same sources as the rooms' targets
# (ina_common, ina_engine, ina_ps_core, ina_sched_core; the same globs), but with the coverage
# instrumentation the fuzzer steers by. Every fuzz target links these, never its rooms'
# uninstrumented ones.
function(ina_fuzz_library name)
  add_library(${name} STATIC ${ARGN})
  target_include_directories(${name} PUBLIC ${INA_INTERNAL_INCLUDES})
  target_compile_options(${name} PRIVATE ${INA_FUZZ_FLAGS})
  target_link_libraries(${name} PUBLIC m Threads::Threads)
endfunction()
ina_fuzz_library(fuzz_common ${INA_COMMON_SRCS})
# The engine's txq.c is built without coverage instrumentation (sanitizers only): its per-input
# setup loop over ~17k messages parses nothing, and uninstrumented the target runs twice as fast.
set(_ina_fuzz_engine_srcs ${INA_ENGINE_SRCS})
list(REMOVE_ITEM _ina_fuzz_engine_srcs ${PROJECT_SOURCE_DIR}/src/engine/txq.c)
add_library(fuzz_engine_txq OBJECT ${PROJECT_SOURCE_DIR}/src/engine/txq.c)
target_include_directories(fuzz_engine_txq PRIVATE ${INA_INTERNAL_INCLUDES})
target_compile_options(fuzz_engine_txq PRIVATE -fsanitize=address,undefined
                       -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
ina_fuzz_library(fuzz_engine ${_ina_fuzz_engine_srcs} $<TARGET_OBJECTS:fuzz_engine_txq>)
target_link_libraries(fuzz_engine PUBLIC fuzz_common)
ina_fuzz_library(fuzz_ps_core ${INA_PS_CORE_SRCS})
target_link_libraries(fuzz_ps_core PUBLIC fuzz_common)
ina_fuzz_library(fuzz_sched_core ${PROJECT_SOURCE_DIR}/src/sched/sched.c)
target_link_libraries(fuzz_sched_core PUBLIC fuzz_common)

# ina-switch's state machine. Its getrandom() calls resolve to the fuzzer's __wrap_getrandom, a
# generator reset per input, so that every input replays exactly.
ina_add_fuzzer(switch ${INA_FUZZ_DIR}/fuzz_switch.c)
target_link_libraries(fuzz_switch PRIVATE fuzz_engine)
target_link_options(fuzz_switch PRIVATE -Wl,--wrap=getrandom)

# The fuzzer owns the clock and the network: stream.c's calls to ina__now_ns(), sendmmsg() and
# recvmmsg() resolve to its __wrap_* functions (GNU ld, gold and lld all know --wrap).
ina_add_fuzzer(reply ${INA_FUZZ_DIR}/fuzz_reply.c ${INA_LIB_SRCS})
target_link_libraries(fuzz_reply PRIVATE fuzz_engine)
target_link_options(fuzz_reply PRIVATE -Wl,--wrap=ina__now_ns -Wl,--wrap=sendmmsg
                    -Wl,--wrap=recvmmsg)

# ina-ps's input handler (getrandom wrapped, as for the switch).
ina_add_fuzzer(ps ${INA_FUZZ_DIR}/fuzz_ps.c)
target_link_libraries(fuzz_ps PRIVATE fuzz_ps_core)
target_link_options(fuzz_ps PRIVATE -Wl,--wrap=getrandom)

# ina-sched's input handler.
ina_add_fuzzer(sched ${INA_FUZZ_DIR}/fuzz_sched.c)
target_link_libraries(fuzz_sched PRIVATE fuzz_sched_core)
