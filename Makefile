# hived: the two commands a fresh clone needs are `make demo` and `make test`.
# Both create .venv and install the project with its test extras first.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: install system-deps demo test bench clean help

help:
	@echo "make demo    - install, then run the main job end to end (SQLite, local launcher, demo spec)"
	@echo "make test    - install (venv, packages, chromium) and run the whole test suite"
	@echo "make bench   - run the benchmarks in quick mode"
	@echo "make clean   - remove the venv and build outputs"

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Debian packages the tests need: chromium for the browser test, xz and curl
# for the shared Kubernetes test API server.
system-deps:
	@missing=""; \
	for p in chromium xz-utils curl; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

demo: install
	$(PY) examples/demo/run_demo.py

test: install system-deps
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest $(PYTEST_ARGS)

bench: install
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b --quick || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info

# the engine's randomized checker with a long budget (CI runs a short one)
.PHONY: soak
soak: install
	HIVED_SOAK_EXAMPLES=$${HIVED_SOAK_EXAMPLES:-3000} $(PY) -m pytest tests/engine/test_engine_state_machine.py -q -p no:cacheprovider
