# fleet developer entry points. `make demo` runs the main job, `make test` the whole suite.
# Both install what they need first (virtualenv, Python packages and, when root, Debian packages).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Debian packages the test suite uses: sshd for the namespace cluster, tmux for the TUI smoke
# test, iproute2 for namespaces and netem, gcc for the simulated NVML library, sqlite3 for the
# SQL view tests (the shell users query the database with), postgresql for the PostgreSQL
# variants of the storage tests (the suite starts its own throwaway server; pg_dump for backup).
DEB_PACKAGES := openssh-server openssh-client iproute2 tmux gcc libc6-dev sqlite3 postgresql \
	chromium chromium-driver

.PHONY: setup bytecode system-deps demo test test-fast lint reliability bench bench-quick clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Byte-compiles fleet's packages, as pip does for an installed one. Where PYTHONDONTWRITEBYTECODE
# is set (these lab machines set it) Python writes no .pyc itself, and each of the fleet processes
# the suite, the demo and the benchmarks start would compile every module from source again
# (0.1-0.15 s of CPU each). Only what changed since the last run is compiled.
bytecode: setup
	$(BIN)/python -m compileall -q db fleet tui tests

# Installs Debian packages when running as root and one is missing; a no-op otherwise.
system-deps:
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=""; for p in $(DEB_PACKAGES); do \
	    dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    policy=/usr/sbin/policy-rc.d; own_policy=0; \
	    if [ ! -e $$policy ]; then printf '#!/bin/sh\nexit 101\n' > $$policy; chmod +x $$policy; own_policy=1; fi; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	    rc=$$?; [ $$own_policy = 1 ] && rm -f $$policy; exit $$rc; \
	  fi; \
	else echo "not root: skipping Debian packages ($(DEB_PACKAGES)); root-only tests will skip"; fi

# A simulated 8-host GPU fleet on 127.0.0.1 (real SSH, probe, monitor, database, dispatch),
# shown in the full-screen TUI; `q` quits and removes everything.
demo: bytecode
	$(BIN)/fleet demo

lint: setup
	$(BIN)/ruff check db fleet tui tests
	$(BIN)/mypy

# The suite runs on TEST_WORKERS pytest-xdist workers (`make test TEST_WORKERS=0`: serially);
# tests/conftest.py pins tests that share a machine-wide resource to one worker (xdist groups).
TEST_WORKERS ?= 2
PYTEST_PARALLEL = -n $(TEST_WORKERS) --dist loadgroup
# pytest caches its rewritten test modules only where Python may write bytecode: without that
# cache each of the three pytest processes spends ~12 s of CPU collecting instead of ~6 s.
PYTEST = env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

test: system-deps bytecode lint
	$(PYTEST) $(PYTEST_PARALLEL) -ra --durations=15

# The long reliability part: 30 s faults on namespace hosts and a 10-minute soak (root).
reliability: system-deps bytecode
	FLEET_LONG_TESTS=1 $(PYTEST) -ra -s --durations=20 tests/reliability tests/security tests/property

# Benchmarks vs peers (asyncssh floor, OpenSSH, parallel-ssh, Ansible) on namespace hosts, written
# to docs/bench/latest.{md,json}; ~16 min on 2 cores; root for the namespace parts (else skipped).
bench: system-deps bytecode
	$(BIN)/python -m pip install --quiet -e '.[bench]'
	timeout 1500 $(BIN)/python -m tests.bench

bench-quick: bytecode
	$(BIN)/python -m tests.bench --quick --out /tmp/fleet-bench

test-fast: bytecode
	$(PYTEST) $(PYTEST_PARALLEL) -q -x -m "not slow"

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
