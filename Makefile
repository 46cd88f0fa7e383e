# Steward. `make demo` runs it; `make test` tests it. `make help` lists the rest.
# Without DATABASE_URL / REDIS_URL both start an embedded PostgreSQL and Redis under var/.

SHELL := /bin/sh
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Placeholders so tools that load settings without touching a database can run anywhere.
TOOL_ENV := DATABASE_URL=$${DATABASE_URL:-postgresql://steward@localhost/steward} \
            REDIS_URL=$${REDIS_URL:-redis://localhost:6379/0}

.PHONY: help install demo test e2e lint format check bench lock clean

help:
	@echo "make demo     set up, start embedded PostgreSQL + Redis, migrate, seed, run web + worker + beat"
	@echo "make test     run the whole test suite (real PostgreSQL and Redis)"
	@echo "make e2e      only the browser tests (Playwright + Chromium; screenshots in var/screenshots)"
	@echo "make lint     ruff, ruff format --check, mypy, import contracts"
	@echo "make check    makemigrations --check and check --deploy with production settings"
	@echo "make bench    run the benchmarks in bench/"
	@echo "make format   apply ruff fixes and formatting"
	@echo "make lock     regenerate requirements/*.txt from pyproject.toml (needs uv)"
	@echo "make clean    remove the virtual environment and var/ (embedded data too)"

$(STAMP): requirements/dev.txt pyproject.toml
	@interp=$$(scripts/find-python) || exit 1; \
	echo "Using $$interp ($$($$interp --version))"; \
	test -x $(PY) || $$interp -m venv $(VENV) || exit 1
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements/dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m config.demo

test: $(STAMP)
	$(PY) -m config.embedded -- $(PY) -m pytest $(PYTEST_ARGS)

e2e: $(STAMP)
	$(PY) -m config.embedded -- $(PY) -m pytest tests/e2e $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(TOOL_ENV) $(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

check: $(STAMP)
	$(PY) -m config.embedded -- sh -c '$(PY) manage.py makemigrations --check --dry-run && \
	DJANGO_SETTINGS_MODULE=config.settings.production \
	SECRET_KEY=$$($(PY) -c "import secrets; print(secrets.token_urlsafe(50))") \
	STEWARD_NODE_KEY_SECRET=$$($(PY) -c "import secrets; print(secrets.token_urlsafe(50))") \
	STEWARD_WEBHOOK_KEY_SECRET=$$($(PY) -c "import secrets; print(secrets.token_urlsafe(50))") \
	ALLOWED_HOSTS=steward.example.com STEWARD_OPERATOR_LEGAL_NAME="Example Ltd" \
	STEWARD_OPERATOR_ADDRESS="1 Example Street" STEWARD_OPERATOR_REGISTRATION="No. 0" \
	$(PY) manage.py check --deploy --fail-level WARNING'

bench: $(STAMP)
	$(PY) -m config.embedded -- $(PY) -m bench $(BENCH_ARGS)

lock:
	scripts/lock

clean:
	rm -rf $(VENV) var
