# Every target creates .venv and installs what it needs; nothing is assumed installed but Python 3.11+.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: docs docs-serve screenshots demo run stack test unit integration e2e lint audit format lock migrate report reliability bench bench-queue bench-peers up down clean

$(STAMP): setup.cfg pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev,embedded,docs,fast]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m devstack.demo demo

run stack: $(STAMP)
	$(BIN)/python -m devstack.demo run

test: $(STAMP)
	$(BIN)/pytest tests

unit: $(STAMP)
	$(BIN)/pytest tests/unit

integration: $(STAMP)
	$(BIN)/pytest tests/integration

e2e: $(STAMP)
	$(BIN)/pytest tests/e2e

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Supply chain: bandit fails on any medium or high finding (a justified one carries # nosec and
# its reason); pip-audit checks the installed dependencies, and says COULD NOT RUN (exit 0)
# where no vulnerability service answers.
audit: $(STAMP)
	$(BIN)/bandit -r app services repositories worker_cli devstack bench gunicorn.conf.py .ci -q -ll && echo "bandit: no medium or high findings"
	$(BIN)/python .ci/audit_dependencies.py

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Pin what is installed now as the versions every install uses.
lock: $(STAMP)
	{ echo '# The versions make installs (pip install -c requirements.lock), and make audit checks.'; \
	  echo "# Regenerate with make lock after changing setup.cfg's requirements."; \
	  $(BIN)/python -m pip freeze --exclude-editable; } > requirements.lock

# The documentation site: the generated reference pages first, then a strict build into site/
# (no network: the theme's own assets only). NO_MKDOCS_2_WARNING quiets a banner about MkDocs 2.
docs: $(STAMP)
	$(BIN)/python -m devstack.reference_docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# The dashboard's screenshots in the docs, taken by its browser tests on the real stack.
screenshots: $(STAMP)
	UI_SCREENSHOTS_DIR=$(CURDIR)/docs/images/ui $(BIN)/pytest tests/e2e/test_dashboard.py

migrate: $(STAMP)
	$(BIN)/python -m app.migrations apply

report: $(STAMP)
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev,embedded,fast,report]'
	$(BIN)/python -m bench.report

# ROUNDS scales every scenario's rounds; the default takes a few minutes on two cores.
ROUNDS ?= 2
reliability: $(STAMP)
	ROUNDS=$(ROUNDS) $(BIN)/python -m bench.reliability

bench: $(STAMP)
	$(BIN)/python -m bench.csv_core

bench-queue: $(STAMP)
	$(BIN)/python -m bench.queue

# Chunkwise beside pgbench -N, Celery on RabbitMQ (127.0.0.1:5672) and on Redis
# (127.0.0.1:6379) and Procrastinate, in turns; PEERS_ARGS passes flags (--tasks, --turns,
# --clients, --timeout, --rabbitmq-url, --redis-url).
bench-peers: $(STAMP)
	$(BIN)/python -m pip install --quiet -c requirements.lock -e '.[dev,embedded,peers]'
	$(BIN)/python -m bench.peers $(PEERS_ARGS)

# The secrets compose.yaml requires (seed tokens, MinIO's root credentials, the coordinators'
# shared session key, the scrape token, PostgreSQL's password): random ones appended to .env
# for each it does not have yet, so an older .env gains the new ones and keeps its own. .env is
# made 0600 every time (an older one may be readable to others, and holds the database
# password); appended and synced, never rewritten, so a crash cannot lose what it held.
# URL-safe, as the password sits inside DATABASE_URL.
up:
	@$(PYTHON) -c 'import os, pathlib, secrets; t = lambda: secrets.token_urlsafe(32); \
	  env = pathlib.Path(".env"); env.touch(0o600); env.chmod(0o600); text = env.read_text(); \
	  have = {line.split("=", 1)[0].strip() for line in text.splitlines() if "=" in line}; \
	  want = {"CHUNKWISE_SEED_USER_TOKEN": "cwu_" + t(), "CHUNKWISE_SEED_OPERATOR_TOKEN": "cwu_" + t(), \
	    "CHUNKWISE_SEED_WORKER_TOKEN": "cww_" + t(), "MINIO_ROOT_USER": "chunkwise-" + secrets.token_hex(4), \
	    "MINIO_ROOT_PASSWORD": t(), "CHUNKWISE_SECRET_KEY": t(), "CHUNKWISE_METRICS_TOKEN": t(), \
	    "POSTGRES_PASSWORD": t()}; \
	  new = [f"{k}={v}\n" for k, v in want.items() if k not in have]; \
	  lead = "\n" if new and text and not text.endswith("\n") else ""; \
	  f = open(env, "a"); f.write(lead + "".join(new)); f.flush(); os.fsync(f.fileno()); f.close(); \
	  new and print("wrote to .env (keep it private):", ", ".join(n.split("=")[0] for n in new))'
	docker compose up --build -d

down:
	docker compose down

clean:
	rm -rf $(VENV) .run *.egg-info
