# Kiln's build. Two entry points (see README): `make` builds everything and runs the main
# example; `make test` runs the whole test suite. Everything lives in .venv/ in the repo root.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: all build runtime cross example deploy-examples java wheel test test-fast test-setup prebuild-c bench clean test-deps fuzz fuzz-smoke fuzz-deps

all: example

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# --no-compile: pip would byte-compile every installed module (torch's and transformers'
	# thousands: 45 of the install's 75 s on the 2-vCPU machine); Python compiles the few
	# hundred that are imported on first import instead, in a few seconds.
	$(PY) -m pip install -q --no-compile -e ".[test,cross]"
	# Real ONNX test models ship inside this wheel; its own dependencies (opencv, ...) are not
	# needed to read the .onnx files, so they are not installed.
	$(PY) -m pip install -q --no-compile --no-deps rapidocr-onnxruntime==1.4.4
	touch $@

# The C runtime (libkiln_runtime.so/.a) and the Python extension built from the same sources.
runtime: $(VENV)/.installed
	$(MAKE) -s -C runtime_c
	$(PY) runtime_c/build_ffi.py

build: runtime

# Running models built for aarch64, armv7 and riscv64 (tests/cross, `kiln run`): Debian's
# qemu-user and the targets' C libraries (libc6-*-cross, the dynamic loader and libc that a
# foreign program needs). Installed when missing and apt-get can (as root); otherwise this says
# what is missing and tests/cross skip naming it. The cross compiler is zig cc (.[cross]).
CROSS_DEBS := qemu-user libc6-arm64-cross libc6-armhf-cross libc6-riscv64-cross
cross:
	@command -v dpkg >/dev/null || { echo "cross: no dpkg; install qemu-user and the targets' C libraries by hand"; exit 0; }; \
	missing=""; for p in $(CROSS_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "cross: installing$$missing"; \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing) >/dev/null 2>&1 \
	    || echo "cross: could not install$$missing; tests/cross will skip"; \
	else echo "cross: missing$$missing (apt-get install$$missing); tests/cross will skip"; fi

example: build
	$(PY) examples/quickstart.py
	$(PY) examples/mlp.py
	$(MAKE) -s -C examples/c run

# The deployment examples in C++ and Java (needs g++ and a JDK); `make test` builds and runs
# them too, through tests/deploy.
deploy-examples: build java
	$(MAKE) -s -C examples/c run
	$(MAKE) -s -C examples/cpp
	examples/cpp/build/main examples/c/build/model/mlp.so
	java -cp bindings/java/build/kiln.jar:bindings/java/build/examples \
	    -Djava.library.path=bindings/java/build RunModel examples/c/build/model/mlp.so

java: runtime
	$(MAKE) -s -C bindings/java all example

# The wheel for users (pip install dist/kiln-*.whl): setup.py builds the C runtime, the cffi
# extension and, with a JDK, the jar into it. pip builds it in an isolated environment (setuptools
# and cffi from the index); .venv is left as it is (editable).
wheel: $(VENV)/.installed
	$(PY) -m pip wheel -q --no-deps -w dist .

# The suite runs in parallel (pytest-xdist), one worker per logical CPU; `worksteal` lets an idle
# worker take tests queued on a busy one, and tests/suite_order.py runs the longest modules first
# (their durations: tests/module_durations.json, then this machine's earlier runs). The 25
# slowest tests are listed at the end. PYTEST_ARGS=... adds options (e.g. PYTEST_ARGS="-n 0"
# runs it in one process). pytest's own exit status is make's: a run that collects no test
# (exit 5) fails, since a suite that tests nothing must not pass.
#
# The suite writes Python's byte code (into .venv and the tree's __pycache__ folders, which git
# ignores) even where PYTHONDONTWRITEBYTECODE is set, as it is on the project's machine: the
# suite starts hundreds of Python processes (xdist and codegen workers, the CLI, the examples),
# and without byte code every one of them compiled the sources of torch and Kiln it imports
# again (`import torch` 3.0 s instead of 1.5; collecting the suite 17 s instead of 8 per worker).
#
# The suite compiles models with their weights (a library of 75 MB for ResNet-18) and would
# leave about 800 MB in Kiln's build cache; its size limit (kiln.codegen.cache_limit) is 512 MB
# for the suite unless KILN_CACHE_LIMIT says otherwise, and pytest deletes each passing test's
# tmp_path as it goes (tmp_path_retention_policy in pyproject.toml): a machine with little disk
# runs it too.
KILN_CACHE_LIMIT ?= 512M
PYTEST_XDIST := -n logical --dist worksteal --durations=25
PYTEST_ENV := PYTHONDONTWRITEBYTECODE= KILN_CACHE_LIMIT=$(KILN_CACHE_LIMIT)
test: test-setup
	$(PYTEST_ENV) $(PY) -m pytest $(PYTEST_XDIST) $(PYTEST_ARGS)

# The tests' set-up: the build, the cross tools, clang. pip's install of the venv keeps one core
# busy for about 40 s; meanwhile the other builds the C that needs neither the venv nor zig
# (prebuild-c: the runtime, its sanitizer, single-threaded and embedded variants that tests
# build, the libFuzzer targets), and `make build` runs once both are done, finding the runtime
# built. It is best effort: what fails there is built again where it is needed (`make build`, or
# a test, under the build lock of tests/build_lock.py), which reports it. Its output goes to
# runtime_c/build/prebuild.log.
test-setup: test-deps
	@mkdir -p runtime_c/build
	@$(MAKE) -s prebuild-c >runtime_c/build/prebuild.log 2>&1 & pre=$$!; \
	$(MAKE) $(VENV)/.installed cross; rc=$$?; wait $$pre; [ $$rc -eq 0 ] || exit $$rc; \
	$(MAKE) build

prebuild-c:
	-$(MAKE) -C runtime_c all asan tsan single embedded
	-$(MAKE) -C runtime_c/fuzz check-clang && $(MAKE) -C runtime_c/fuzz

# The same without the tests marked slow. Exit 5 then also means "every test selected by
# PYTEST_ARGS is slow" (e.g. PYTEST_ARGS=tests/packaging), which is not a failure; it passes
# only when the same selection without -m collects some test, so an empty suite still fails.
test-fast: test-setup
	$(PYTEST_ENV) $(PY) -m pytest $(PYTEST_XDIST) -m "not slow" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ] && $(PY) -m pytest --collect-only -q $(PYTEST_ARGS) >/dev/null 2>&1; then \
	    echo "test-fast: every selected test is marked slow; none run"; exit 0; fi; exit $$rc

# System tools the tests use beyond Python packages: clang with its libFuzzer runtime for the
# fuzz targets (tests/reliability/test_fuzz.py). Installed with apt-get when missing and this
# runs as root; otherwise (or if that fails) those tests skip and say what to install.
test-deps:
	-@$(MAKE) -s -C runtime_c/fuzz check-clang >/dev/null 2>&1 || $(MAKE) -s fuzz-deps

fuzz-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing clang (libFuzzer) with apt-get"; \
	    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null; \
	else echo "clang with libFuzzer is missing: install clang (e.g. apt-get install clang)"; exit 1; fi

# Coverage-guided fuzzing of the runtime's artifact readers (runtime_c/fuzz, docs/reliability.md):
# `make fuzz` a campaign of FUZZ_SECONDS per target (default 30 min), `make fuzz-smoke` 60 s each.
FUZZ_SECONDS ?= 1800
fuzz: build
	$(PY) tests/reliability/fuzz_run.py --seconds $(FUZZ_SECONDS) $(FUZZ_ARGS)

fuzz-smoke: build
	$(PY) tests/reliability/fuzz_run.py --seconds 60 $(FUZZ_ARGS)

bench: build
	$(PY) bench/run.py

clean:
	$(MAKE) -s -C runtime_c clean
	-$(MAKE) -s -C bindings/java clean
	-$(MAKE) -s -C examples/c clean
	-$(MAKE) -s -C examples/cpp clean
	rm -rf $(VENV) .pytest_cache compiler/kiln/_ffi* build dist
