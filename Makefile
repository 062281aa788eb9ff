# Makefile: convenience front end to CMake for ina. `make help` lists the targets.

SHELL := /bin/bash

BUILD_DIR  := build
ASAN_DIR   := build-asan
BUILD_TYPE ?= RelWithDebInfo
JOBS       ?= 2
# SKIP_DEPS=1 skips the package check (scripts/deps.sh).
SKIP_DEPS  ?= 0
# make install: into $(DESTDIR)$(PREFIX).
PREFIX  ?= /usr/local
DESTDIR ?=
# FUZZ_SECONDS: how long `make fuzz` runs each fuzz target.
FUZZ_SECONDS ?= 300

SAN_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
           UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

.DEFAULT_GOAL := all
.PHONY: all deps deps-test demo check test test-gcc asan asan-run fuzz install uninstall clean help

## all   : check packages, configure and build build/ (default compiler, no -Werror by default)
all: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)
	env -u MAKELEVEL cmake --build $(BUILD_DIR) -j$(JOBS)

## deps  : check (and as root install) the Debian packages needed to build and test
deps:
	@if [ "$(SKIP_DEPS)" = 1 ]; then echo "deps: skipped (SKIP_DEPS=1)"; else bash scripts/deps.sh; fi

## deps-test : deps, plus the packages only the tests need (torch, scikit-learn, OpenMPI)
deps-test:
	@if [ "$(SKIP_DEPS)" = 1 ]; then echo "deps: skipped (SKIP_DEPS=1)"; else bash scripts/deps.sh --test; fi

## demo  : build, then run scripts/demo.sh (ina-bench, 4 local workers, float32 and int32)
demo: all
	INA_BUILD_DIR=$(BUILD_DIR) bash scripts/demo.sh

## check : the quick tier, under a minute of tests: gcc build with -Werror, then the ctests
##         labelled quick (unit tests, a short end-to-end subset, the ABI, version, source-map
##         and layer checks); for every change, before `make test`
check: deps
	CC=gcc cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DINA_WERROR=ON -DINA_SANITIZE=OFF
	env -u MAKELEVEL cmake --build $(BUILD_DIR) -j$(JOBS)
	bash scripts/run-ctest.sh $(BUILD_DIR) -L quick

## test  : the full tier: gcc build with -Werror + every ctest, then clang ASan/UBSan build
##         with -Werror + every ctest, all serially; both always run, and both
##         must pass (CI)
test: deps-test
	@rc=0; \
	$(MAKE) --no-print-directory test-gcc || rc=1; \
	$(MAKE) --no-print-directory asan-run || rc=1; \
	if [ $$rc -eq 0 ]; then echo "make test: PASSED (gcc and clang+asan/ubsan)"; \
	else echo "make test: FAILED (see output above)" >&2; fi; \
	exit $$rc

## asan  : only the clang ASan/UBSan build (build-asan/) and its tests
asan: deps-test
	@$(MAKE) --no-print-directory asan-run

# Internal: no package check.
test-gcc:
	CC=gcc cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DINA_WERROR=ON -DINA_SANITIZE=OFF
	env -u MAKELEVEL cmake --build $(BUILD_DIR) -j$(JOBS)
	bash scripts/run-ctest.sh $(BUILD_DIR)

asan-run:
	CC=clang cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DINA_WERROR=ON -DINA_SANITIZE=ON
	env -u MAKELEVEL cmake --build $(ASAN_DIR) -j$(JOBS)
	$(SAN_ENV) bash scripts/run-ctest.sh $(ASAN_DIR)

## fuzz  : build build-asan/ (clang, ASan/UBSan) and run each libFuzzer target FUZZ_SECONDS
##         (default 300); `make test` runs them INA_FUZZ_SECONDS (20) each as ctests
fuzz: deps
	CC=clang cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DINA_WERROR=ON -DINA_SANITIZE=ON
	env -u MAKELEVEL cmake --build $(ASAN_DIR) -j$(JOBS) --target fuzz_switch fuzz_reply
	@rc=0; for s in switch reply; do \
	    $(SAN_ENV) bash tests/fuzz/run-fuzz.sh $(ASAN_DIR)/tests/fuzz/fuzz_$$s $$s $(FUZZ_SECONDS) \
	        $(CURDIR)/$(ASAN_DIR) $(CURDIR) || rc=1; \
	done; exit $$rc

## install : build, then install into $(DESTDIR)$(PREFIX) (PREFIX=/usr/local): libina (.so, .a),
##           ina.h, ina.pc, the CMake package, ina-switch, ina-bench, libina-mpi.so (if built),
##           the Python package, man pages (docs/INSTALL.md)
install: all
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD_DIR) --prefix "$(PREFIX)"

## uninstall : remove what the last `make install` installed (same DESTDIR)
uninstall:
	DESTDIR="$(DESTDIR)" bash scripts/uninstall.sh $(BUILD_DIR)/install_manifest.txt

## clean : remove build/ and build-asan/
clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)

## help  : this list
help:
	@echo "Targets:"
	@sed -n 's/^## /  /p' $(MAKEFILE_LIST)
	@echo "Variables: BUILD_TYPE=$(BUILD_TYPE) JOBS=$(JOBS) SKIP_DEPS=$(SKIP_DEPS) FUZZ_SECONDS=$(FUZZ_SECONDS)"
	@echo "           PREFIX=$(PREFIX) DESTDIR=$(DESTDIR)"

# ---- Benchmarks (bench/): comparison with OpenMPI and Gloo; not part of `make test` ----------
BENCH_ARGS ?=
.PHONY: bench

## bench : build, then bench/compare.sh $(BENCH_ARGS) (ina vs OpenMPI vs Gloo, emulated cluster
##         and loopback; as root; BENCH_ARGS=--quick for ~1 minute, --full for everything);
##         writes bench/results/latest.{md,png}, and (not with --quick) docs/BENCHMARKS.md and
##         README.md's headline
bench: all
	bash bench/compare.sh $(BENCH_ARGS)
