# TuneFarm developer entry points. Every target bootstraps .venv when it is missing.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo demo-frontends demo-llm examples test test-fast bench bench-models lint clean

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null 2>&1 || { echo "error: $(PY) not found (set PY=python3.x)"; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,torch,onnx,hf,ort]'
	touch $(STAMP)

install: $(STAMP)

DEMO_DB ?= sqlite:///tunefarm-demo.db
DEMO_MODEL ?= examples/mlp.py
DEMO_TRIALS ?= 32

demo: $(STAMP)
	$(BIN)/tunefarm tune $(DEMO_MODEL) --trials $(DEMO_TRIALS) --db $(DEMO_DB) --seed 0
	mkdir -p out
	$(BIN)/tunefarm build $(DEMO_MODEL) --db $(DEMO_DB) -o out/$(notdir $(basename $(DEMO_MODEL))).so
	$(BIN)/tunefarm bench $(DEMO_MODEL) --db $(DEMO_DB)
	$(BIN)/tunefarm tune examples/mlp_dynamic.py --shape b=1,8,32 --trials 48 --db $(DEMO_DB) --seed 0
	$(BIN)/tunefarm build examples/mlp_dynamic.py --db $(DEMO_DB) -o out/mlp_dynamic.so
	$(BIN)/tunefarm bench examples/mlp_dynamic.py --db $(DEMO_DB) --shape b=1,5,8,20,32,65
	$(BIN)/tunefarm tune examples/transformer_block_dynamic.py --shape s=4,16,64 --trials 128 --db $(DEMO_DB) --seed 0
	$(BIN)/tunefarm build examples/transformer_block_dynamic.py --db $(DEMO_DB) -o out/transformer_block_dynamic.so
	$(BIN)/tunefarm bench examples/transformer_block_dynamic.py --db $(DEMO_DB) --shape s=1,7,16,17,40,64,65
	$(BIN)/tunefarm db stats --db $(DEMO_DB)
	@echo "see it in the browser: $(BIN)/tunefarm dashboard --db $(DEMO_DB)"

# Regenerate the ONNX and PyTorch example models (committed; small).
examples: $(STAMP)
	$(BIN)/python examples/make_onnx_mlp.py
	$(BIN)/python examples/export_transformer_encoder.py

# Second part of the demo: models as they come from ONNX and PyTorch (torch.export).
demo-frontends: $(STAMP)
	mkdir -p out
	$(BIN)/tunefarm tune examples/mlp_batch.onnx --shape batch=1,16,64 --trials 32 --db $(DEMO_DB) --seed 0
	$(BIN)/tunefarm build examples/mlp_batch.onnx --db $(DEMO_DB) -o out/mlp_batch.so
	$(BIN)/tunefarm bench examples/mlp_batch.onnx --db $(DEMO_DB) --shape batch=1,5,16,40,64,129
	$(BIN)/tunefarm tune examples/transformer_encoder.pt2 --shape s=16,64 --trials 48 --db $(DEMO_DB) --seed 0
	$(BIN)/tunefarm build examples/transformer_encoder.pt2 --db $(DEMO_DB) -o out/transformer_encoder.so
	$(BIN)/tunefarm bench examples/transformer_encoder.pt2 --db $(DEMO_DB) --shape s=1,7,16,40,64,100

demo-llm: $(STAMP)  ## a small random-init decoder: tuned per bucket, built, generating
	mkdir -p out
	$(BIN)/python examples/make_tiny_decoder.py out/tiny-llama --arch llama
	$(BIN)/tunefarm tune out/tiny-llama --shape prompt=1,16 --shape context=64,256 --trials 256 --db $(DEMO_DB) --seed 0
	$(BIN)/tunefarm build out/tiny-llama --db $(DEMO_DB) -o out/tiny-llama.so
	$(BIN)/tunefarm generate out/tiny-llama --lib out/tiny-llama.so --prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 32 --json

test: $(STAMP)
	$(BIN)/python -m pytest -ra --durations=15 $(PYTEST_ARGS)

test-fast: $(STAMP)
	$(BIN)/python -m pytest -ra -m "not slow" $(PYTEST_ARGS)

# The scoreboard: results/<date>-<host>.json + docs/performance.md (~10 min on 2 cores), then
# the time-to-quality short form, its section appended to docs/performance.md.
# Threads pinned to the cores; BENCH_ARGS=--quick for a smoke run.
BENCH_THREADS ?= $(shell nproc)
bench: $(STAMP)
	OPENBLAS_NUM_THREADS=$(BENCH_THREADS) TVM_NUM_THREADS=$(BENCH_THREADS) \
		$(BIN)/python -m benchmarks suite $(BENCH_ARGS)
	$(BIN)/python -m benchmarks time-to-quality --workloads mlp --seeds 3 --trials-per-task 8 --budget trials

# The per-model and symbolic-shape benchmarks (longer; figures in docs/symbolic-shapes.md).
bench-models: $(STAMP)
	$(BIN)/python -m benchmarks models
	$(BIN)/python -m benchmarks symbolic --trials-per-task 8

lint: $(STAMP)
	$(BIN)/ruff check tuner workers database tests examples benchmarks
	$(BIN)/ruff format --check tuner workers database tests examples benchmarks

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache .ruff_cache

# docs/demo-output.md and README's sample output, from a real run of the `demo` target's
# commands (read with `make -n demo`) into a scratch database. DOCS_OUTPUT_ARGS=--quick: the
# first model only, at 8 trials (write it elsewhere with --output/--readme).
# docs/cli.md, the command-line reference, from the typer app (a test fails when it is stale).
.PHONY: docs-cli
docs-cli: $(STAMP)
	$(BIN)/python -m tuner.cli.docgen

.PHONY: docs-output
docs-output: $(STAMP)
	$(BIN)/python -m benchmarks.docs_output $(DOCS_OUTPUT_ARGS)
