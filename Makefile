# Two commands: `make demo` (sets up and runs the demo), `make test` (sets up and runs the tests).
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= python3

.PHONY: demo test system-deps lint docs check bench fuzz soak soak-stores clean image

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/psyq demo

# The whole suite on asyncio's loop, then again on uvloop, the loop of uvicorn and many servers
# (PSYQ_TEST_LOOP, tests/conftest.py), where the loop matters most: the conformance suite
# (every backend), the psyq:// server and client, Postgres, Redis, SQLite and the engine,
# with the fault tests of the live move and of the probes. The rest (Spark pipelines, Node
# interop, the wheel, the browser) mostly runs other processes; it passes on uvloop too
# (`PSYQ_TEST_LOOP=uvloop pytest`, the whole suite), at about as much time again as the
# asyncio run (docs/architecture.md, "Tests and services").
UVLOOP_SUBSET := $(addprefix tests/,conformance server postgres redis_backend sqlite engine \
	migrate/test_live_kills.py cli/test_health.py)

# The whole Postgres conformance suite again under the `when-read` event policy (issue
# 52: ~45 s; a subset of it once hid workers held by a global concurrency that no event
# woke).
PG_WHEN_READ := tests/conformance

# `make test` runs two lanes at once (two pytest processes: much of the suite waits on
# servers, subprocesses and JVMs, so two cores do both): LANE2's folders on asyncio, then
# UVLOOP_SUBSET on uvloop, logged to build/test-lane2.log and shown at the end; beside it,
# every other test on asyncio (the suite less LANE2, so a new folder is never left out).
# Each lane starts its own servers (free ports, temp folders: tests/redis_service.py,
# tests/server/server_proc.py) and shares only the Postgres server, where every test has
# its own schema or database. LANE2 keeps the npm installs (compat, interop) in one run.
LANE2 := $(addprefix tests/,compat interop migrate dashboard wheel)
PYTEST := $(PY) -m pytest -q

# What the tests need from the system that its package tool can bring (Debian's chromium,
# as root with apt-get); where it cannot, the tests that need it are skipped, naming it.
system-deps:
	scripts/system-deps

test: $(VENV)/.installed system-deps
	@mkdir -p build
	@echo "make test: lane 2 ($(LANE2) on asyncio, then UVLOOP_SUBSET on uvloop) logs to build/test-lane2.log"
	@start=$$(date +%s); \
	( $(PYTEST) -o cache_dir=.pytest_cache/lane2 $(LANE2); one=$$?; \
	  echo "lane 2: asyncio part done at $$(( $$(date +%s) - start )) s"; \
	  PSYQ_TEST_LOOP=uvloop $(PYTEST) -o cache_dir=.pytest_cache/lane2 $(UVLOOP_SUBSET); two=$$?; \
	  echo "lane 2: done at $$(( $$(date +%s) - start )) s"; exit $$(( one || two )) \
	) > build/test-lane2.log 2>&1 & lane2=$$!; \
	$(PYTEST) $(addprefix --ignore=,$(LANE2)); lane1=$$?; \
	PSYQ_PG_EVENTS=when-read $(PYTEST) -k postgres $(PG_WHEN_READ) || lane1=1; \
	echo "lane 1: done at $$(( $$(date +%s) - start )) s; waiting for lane 2"; \
	wait $$lane2; lane2=$$?; \
	echo "--- lane 2 (build/test-lane2.log) ---"; cat build/test-lane2.log; \
	exit $$(( lane1 || lane2 ))

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy --strict psyq tests migrate bench --exclude bench/peers

# The documentation site (mkdocs.yml) into site/; --strict: a broken link or reference fails.
docs: $(VENV)/.installed
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

check: lint docs test

# psyq's container image (psyq, or IMAGE=tag) with docker or podman, on the official
# Python image where a registry serves it, else on a base made from Debian's packages
# (scripts/image says which, and the size); the wheelhouse comes from the venv's pip.
IMAGE ?= psyq
image: $(VENV)/.installed
	PSYQ_IMAGE_PIP=$(PY) scripts/image build $(IMAGE)

bench: $(VENV)/.installed
	$(PY) -m bench.run --peers bunqueue --backend memory --backend sqlite --backend sqlite-durable

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build site *.egg-info

# The property tests of bad input with many more examples than CI runs.
fuzz: $(VENV)/.installed
	HYPOTHESIS_PROFILE=long $(PY) -m pytest -q tests/conformance/test_property_add.py

# The concurrency layer (tests/concurrency: several producer, worker and admin processes on
# Redis, Postgres and a psyq server) at ten times its CI size; it prints the figures that
# docs/reliability.md shows. PSYQ_SOAK_SCALE sets another size.
PSYQ_SOAK_SCALE ?= 10
soak: $(VENV)/.installed
	PSYQ_SOAK_SCALE=$(PSYQ_SOAK_SCALE) $(PY) -m pytest -q -s tests/concurrency

# The stores' fault scenarios (the live move under repeated kill -9 of the mover; the
# shared sqlite:/// file and psyq server restarts as their tests join SOAK_STORES) at ten
# times their CI size (the live move's: about 7 min): each prints one line of jobs, lost, ran twice and seconds
# (tests/soak.py). A scenario sizes itself with tests.soak.scaled and reports with
# tests.soak.report; PSYQ_SOAK_SCALE sets another size.
SOAK_STORES := tests/migrate/test_live_kills.py tests/server/test_server_restart.py \
	tests/sqlite/test_shared_faults.py::test_a_peer_through_any_alias_takes_over_a_killed_owner_losing_nothing
soak-stores: $(VENV)/.installed
	PSYQ_SOAK_SCALE=$(PSYQ_SOAK_SCALE) $(PY) -m pytest -q -s $(SOAK_STORES)
