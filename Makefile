# Two commands matter: `make demo` (the main job) and `make test` (the whole suite, as CI runs it).
# Each sets itself up on first use and is quick on the second run.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Two pytest workers, one per core: most tests wait on processes and sockets. Each module's tests stay
# on one worker, in order (tests/conftest.py), and so do tests sharing one Docker engine (--dist loadgroup).
PYTEST_WORKERS ?= -n 2 --dist loadgroup
AZURITE_STAMP := azurite/node_modules/.installed
TS_CLIENT_STAMP := tests/mcp/ts-client/node_modules/.installed
CLAUDE_CODE_STAMP := tests/claude_code/host/node_modules/.installed
CODEX_STAMP := tests/codex/host/node_modules/.installed

.PHONY: setup system-deps demo up serve typecheck format test test-fast bench lock clean

setup: $(STAMP) $(AZURITE_STAMP) $(TS_CLIENT_STAMP) $(CLAUDE_CODE_STAMP) $(CODEX_STAMP)

# Runtime dependencies exactly as the image gets them (the hashed lock), then the test extras.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet --require-hashes -r requirements.lock
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $@

$(AZURITE_STAMP): azurite/package.json azurite/package-lock.json
	cd azurite && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(TS_CLIENT_STAMP): tests/mcp/ts-client/package.json tests/mcp/ts-client/package-lock.json
	cd tests/mcp/ts-client && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The real Claude Code the tests drive (tests/claude_code): ~400 MB through its platform package.
$(CLAUDE_CODE_STAMP): tests/claude_code/host/package.json tests/claude_code/host/package-lock.json
	cd tests/claude_code/host && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The real OpenAI Codex CLI, a host without pushes (tests/codex): ~424 MB through its platform package.
$(CODEX_STAMP): tests/codex/host/package.json tests/codex/host/package-lock.json
	cd tests/codex/host && npm ci --no-audit --no-fund --loglevel=error
	touch $@

demo: $(STAMP) $(AZURITE_STAMP)
	$(VENV)/bin/entrabot-fleet demo

# A local fleet for your own agent until Ctrl-C: prints its URLs, the token and the connect lines.
up: $(STAMP) $(AZURITE_STAMP)
	$(VENV)/bin/entrabot-fleet up

serve: $(STAMP)
	$(VENV)/bin/entrabot-fleet serve

system-deps:
	bash deploy/docker/ci-setup.sh

typecheck: setup
	$(PY) -m mypy

# ruff format at 100 columns (pyproject.toml); make test fails on a file it would change.
format: $(STAMP)
	$(VENV)/bin/ruff format .

test: setup system-deps
	$(VENV)/bin/ruff format --check --quiet .
	$(PY) -m mypy
	$(PY) -m pytest -q -ra $(PYTEST_WORKERS)

test-fast: setup system-deps
	$(PY) -m pytest -q -ra $(PYTEST_WORKERS) -m 'not slow'

bench: setup
	$(PY) -m bench

# Re-resolve the runtime dependencies (after a change to pyproject.toml's dependencies, or to take
# updates): pip-tools in a throwaway venv writes requirements.lock with every wheel's hash.
LOCK_VENV := .venv-lock
lock:
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install --quiet 'pip-tools>=7.4,<8'
	$(LOCK_VENV)/bin/pip-compile --quiet --upgrade --generate-hashes --strip-extras --allow-unsafe \
		--all-build-deps --no-emit-index-url --no-emit-find-links -o requirements.lock pyproject.toml
	rm -rf $(LOCK_VENV)

clean:
	rm -rf $(VENV) azurite/node_modules .pytest_cache .mypy_cache
