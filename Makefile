# oncelog developer entry points. `make serve` and `make test` are the whole first run.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
BASE    := $(VENV)/.installed-base
SPARK   := $(VENV)/.installed-spark
FULL    := $(VENV)/.installed
# `make serve` enables KIP-939 two-phase commit, which the Spark exactly-once sink needs (docs/settings.md: "Two-phase
# commit"); a plain `oncelog serve` keeps Kafka's default (off). More settings: make serve SERVE_ARGS='--set k=v'
SERVE_ARGS ?=
# `make cluster` settings for every broker, e.g. make cluster CLUSTER_ARGS='--set log.retention.hours=24'
CLUSTER_ARGS ?=

.PHONY: venv serve cluster test test-fast bench demo gen lint docs clean

# the broker and the CLI only (what `make serve` needs)
$(BASE): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# + PySpark, pyarrow, pandas (the Spark connector and the demo)
$(SPARK): $(BASE)
	$(BIN)/python -m pip install -q -e '.[spark]'
	touch $@

# + test clients, linters: everything `make test` and `make lint` use
$(FULL): $(BASE)
	$(BIN)/python -m pip install -q -e '.[test,dev,spark]'
	touch $@ $(SPARK)

venv: $(FULL)

serve: $(BASE)
	$(BIN)/oncelog serve --data-dir ./data --listen 127.0.0.1:9092 --set transaction.two.phase.commit.enable=true $(SERVE_ARGS)

# etcd (Debian etcd-server, on PATH) and three brokers on 127.0.0.1:9092-9094, data and logs in ./data/cluster,
# two-phase commit on (as make serve). A process that exits is reported at once with the command that restarts it
# (kill -USR1 PID); Ctrl-C stops all and exits 0. One command without shell syntax: make runs it directly, so the
# Ctrl-C reaches it and make waits for the brokers' clean shutdown.
cluster: $(BASE)
	$(BIN)/python -m oncelog.testing.cluster --data-dir ./data/cluster --ports 9092,9093,9094 --etcd-port 2379 $(CLUSTER_ARGS)

test: $(FULL)
	$(BIN)/python -m pytest tests -p no:cacheprovider

test-fast: $(FULL)
	$(BIN)/python -m pytest tests/unit -q

bench: $(FULL)
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python bench/run.py

demo: $(SPARK)
	$(BIN)/python examples/clickstream/run_demo.py

# the Kafka wire codecs (src/oncelog/protocol/messages/) from the schemas in schemas/; commit both together
gen: $(BASE)
	$(BIN)/python tools/gen_protocol.py

lint: $(FULL)
	$(BIN)/ruff check src tests tools bench examples
	$(BIN)/mypy

docs: $(BASE)
	$(BIN)/python tools/gen_settings_doc.py

clean:
	rm -rf $(VENV) data build *.egg-info
