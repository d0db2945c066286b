# hived: the two commands a fresh clone needs are `make demo` and `make test`.
# Both create .venv and install the project with its test extras first.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NODE   := $(VENV)/node
PROXY  := $(NODE)/node_modules/.bin/configurable-http-proxy
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=
ORDER_TESTS := tests/core tests/engine tests/layout   # run twice by `make test`, in two random orders
SEED        ?=   # pytest-randomly's seed for `make test` (empty: a new one, printed at the top)

.PHONY: install system-deps demo lint test bench clean help gpu-wheels

help:
	@echo "make demo    - install, then run the main job end to end (SQLite, local launcher, demo spec)"
	@echo "make lint    - ruff over the tree, mypy over the hived packages (strict on hived.core)"
	@echo "make test    - install (venv, packages, chromium, JupyterHub's proxy), lint, then run the whole test suite"
	@echo "               in a random order (pytest-randomly, seed printed; SEED=N repeats an order),"
	@echo "               then tests/core, tests/engine and tests/layout again in a second order"
	@echo "make soak    - the engine's randomized checker with a long budget (HIVED_SOAK_EXAMPLES)"
	@echo "make bench   - run the benchmarks in quick mode"
	@echo "make mutants - mutation testing with mutmut (MUTANT_SCOPE=alloc|access|engine-main|engine-events|..); not make test"
	@echo "make gpu-wheels - the wheel folder .whl/ that tests/gpu/on_device.sh installs on a GPU machine"
	@echo "make clean   - remove the venv and build outputs"

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# JupyterHub's proxy (npm), for the tests that run a real Hub (tests/hub)
$(PROXY): | $(STAMP)
	npm install --silent --no-fund --no-audit --prefix $(NODE) configurable-http-proxy@5 >/dev/null

install: $(STAMP)

# Debian packages the tests need: chromium for the browser test, xz and curl
# for the shared Kubernetes test API server, node and npm for JupyterHub's proxy.
system-deps:
	@missing=""; \
	for p in chromium xz-utils curl; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi

demo: install
	$(PY) examples/demo/run_demo.py

lint: install
	$(PY) .ci/lint.py

test: system-deps install $(PROXY) lint
	PATH="$(CURDIR)/$(VENV)/bin:$(CURDIR)/$(NODE)/node_modules/.bin:$$PATH" $(PY) -m pytest -p randomly \
	  $(if $(strip $(SEED)),--randomly-seed=$(strip $(SEED))) --durations=30 $(PYTEST_ARGS)
	@echo "second order: the allocator, the engine and the layout checks again, under a seed of their own"
	$(PY) -m pytest -q -p randomly $(ORDER_TESTS)

bench: install $(PROXY)
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b --quick || exit 1; done

# tests/gpu/on_device.sh on a GPU machine that reaches no registry: the hived
# wheel and what it needs beyond that machine's Python 3.12 (tests/gpu/wheels.txt)
GPU_PLATFORMS := $(foreach p,manylinux_2_28 manylinux_2_27 manylinux_2_26 manylinux_2_17 manylinux2014 manylinux1 \
                   linux,--platform $(p)_x86_64)
gpu-wheels: install
	rm -rf .whl && mkdir -p .whl
	$(PY) -m pip wheel -q --no-deps -w .whl . && rm -rf build
	$(PY) -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp $(GPU_PLATFORMS) \
	    -d .whl -r tests/gpu/wheels.txt
	@du -sh .whl

clean:
	rm -rf $(VENV) build *.egg-info

# the engine's randomized checker with a long budget (CI runs a short one)
.PHONY: soak
soak: install
	HIVED_SOAK_EXAMPLES=$${HIVED_SOAK_EXAMPLES:-3000} $(PY) -m pytest tests/engine/test_engine_state_machine.py -q -p no:cacheprovider --timeout=0

# Mutation testing (not part of `make test`; docs/allocator.md, "Mutation testing"). mutmut changes
# the scope's files one small edit at a time, in place, and runs that scope's tests against each
# mutant; a mutant no test kills is a gap. It restores every file when it ends.
#   make mutants                      core/alloc/ against the allocator's tests
#   make mutants MUTANT_SCOPE=engine  the engine's four files (or one part: engine-main, -events, ... below)
#   make mutants MUTANT_SCOPE=access  service/access.py against tests/service/test_access.py
# Each test run loads no pytest plugin and no conftest (a second instead of ten of start-up); the
# helper folders go on PYTHONPATH instead.
MUTMUT_VERSION ?= 2.5.1
MUTANT_SCOPE   ?= alloc
# The engine's judges: the test files under tests/engine that drive the engine through its public
# methods, the targeted ones (test_engine_mutants_*.py) first, without the long checks (the state
# machine soak, the static walk over the engine's readers, the FitGpp workload's grace sample,
# backfill's 25-seed replays, the 12 random sequences; make test runs them all). A mutant nothing
# kills costs about 2.6 s of CPU against 7.5 s for the five files before (docs/engine.md).
ENGINE_JUDGES  := $(sort $(wildcard tests/engine/test_engine_mutants_*.py)) \
                  $(addprefix tests/engine/,test_engine_control.py test_engine_hooks.py test_engine_hived.py \
                  test_engine_issue15.py test_engine_policies.py test_engine_quota.py test_failures.py \
                  test_fitgpp_cells.py test_engine_grace.py test_backfill.py) \
                  --deselect tests/engine/test_engine_grace.py::test_the_default_max_grace_holds_the_fitgpp_workload
ENGINE_REPLAYS := --deselect tests/engine/test_backfill.py::test_property_a_head_never_starts_later_than_strict_fifo_would_start_it
ENGINE_BOOKS   := tests/engine/test_engine_random.py
ENGINE_RESTORE := tests/engine/test_engine_boundary.py \
                  --deselect tests/engine/test_engine_boundary.py::test_nothing_outside_the_engine_reaches_into_its_job_table
# The engine in parts, each meant to end within 30 minutes under nice on a shared 2-core machine:
#   engine-main core/engine.py   engine-events engine_events.py   engine-control engine_control.py
#   engine-books engine_books.py (with the random sequences)   engine-more engine_backfill.py,
#   engine_restore.py, engine_reasons.py (with backfill's replays and the restore round trips)
# engine is the first four files together.
ifeq ($(MUTANT_SCOPE),engine)
MUTANT_PATHS   ?= core/engine.py,core/engine_books.py,core/engine_events.py,core/engine_control.py
MUTANT_TESTS   ?= $(ENGINE_JUDGES) $(ENGINE_REPLAYS) $(ENGINE_BOOKS)
else ifeq ($(MUTANT_SCOPE),engine-main)
MUTANT_PATHS   ?= core/engine.py
MUTANT_TESTS   ?= $(ENGINE_JUDGES) $(ENGINE_REPLAYS)
else ifeq ($(MUTANT_SCOPE),engine-events)
MUTANT_PATHS   ?= core/engine_events.py
MUTANT_TESTS   ?= $(ENGINE_JUDGES) $(ENGINE_REPLAYS)
else ifeq ($(MUTANT_SCOPE),engine-control)
MUTANT_PATHS   ?= core/engine_control.py
MUTANT_TESTS   ?= $(ENGINE_JUDGES) $(ENGINE_REPLAYS)
else ifeq ($(MUTANT_SCOPE),engine-books)
MUTANT_PATHS   ?= core/engine_books.py
MUTANT_TESTS   ?= $(ENGINE_JUDGES) $(ENGINE_REPLAYS) $(ENGINE_BOOKS)
else ifeq ($(MUTANT_SCOPE),engine-more)
MUTANT_PATHS   ?= core/engine_backfill.py,core/engine_restore.py,core/engine_reasons.py
MUTANT_TESTS   ?= $(ENGINE_JUDGES) $(ENGINE_RESTORE)
else ifeq ($(MUTANT_SCOPE),access)
MUTANT_PATHS   ?= service/access.py
MUTANT_TESTS   ?= tests/service/test_access.py
else
MUTANT_PATHS   ?= core/alloc/
MUTANT_TESTS   ?= tests/core/test_allocator_reconfigure.py tests/core/test_allocator_restore.py \
                  tests/core/test_allocator_rules.py tests/core/test_allocator_grant.py \
                  tests/core/test_allocator_faults.py tests/core/test_reconfigure_properties.py
endif
.PHONY: mutants
mutants: install
	$(PY) -m pip install -q "mutmut==$(MUTMUT_VERSION)"
	HIVED_HYPOTHESIS_EXAMPLES=$${HIVED_HYPOTHESIS_EXAMPLES:-15} $(VENV)/bin/mutmut run --paths-to-mutate $(MUTANT_PATHS) \
	  --runner "env PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 PYTHONPATH=tests/core:tests/engine \
	            $(PY) -m pytest -x -q --noconftest -p no:cacheprovider $(MUTANT_TESTS)"; \
	  rc=$$?; $(VENV)/bin/mutmut results; [ $$((rc & 1)) -eq 0 ]   # survivors are reported, a fatal error fails
