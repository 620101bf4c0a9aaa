# oncelog developer entry points. `make serve` and `make test` are the whole first run.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: venv serve test test-fast bench demo gen lint docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,dev,spark]'
	touch $(STAMP)

venv: $(STAMP)

serve: $(STAMP)
	$(BIN)/oncelog serve --data-dir ./data --listen 127.0.0.1:9092

test: $(STAMP)
	$(BIN)/python -m pytest tests -p no:cacheprovider

test-fast: $(STAMP)
	$(BIN)/python -m pytest tests/unit -q

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python bench/run.py

demo: $(STAMP)
	$(BIN)/python examples/clickstream/run_demo.py

# the Kafka wire codecs (src/oncelog/protocol/messages/) from the schemas in schemas/; commit both together
gen: $(STAMP)
	$(BIN)/python tools/gen_protocol.py

docs: $(STAMP)
	$(BIN)/python tools/gen_settings_doc.py

lint: $(STAMP)
	$(BIN)/ruff check src tests tools
	$(BIN)/mypy

clean:
	rm -rf $(VENV) data build *.egg-info
