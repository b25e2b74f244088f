#!/usr/bin/env bash
# Build .venv-titan/: torchtitan 0.3.0 (PyPI), the oracle of the torchtitan loader family's tests
# (tests/dataloaders/torchtitan/): its own HuggingFaceTextDataLoader, InterleavedDataset and
# CheckpointManager run on CPU over tiny local datasets the tests build.
#
# Why a separate environment: torchtitan 0.3.0 requires datasets<4.8.0 (its METADATA), the
# project's venv has datasets 5.x. This venv sees the project's packages (torch 2.13.0 CPU, numpy,
# tokenizers) through a .pth file placed AFTER its own site-packages (as .venv-olmo does), so
# torch is never re-installed (a plain install would pull the CUDA build). torchtitan itself is
# installed with --no-deps: its other requirements (wandb, tensorboard, pillow, einops,
# safetensors) are for training and logging, not for the modules the oracle imports; installed
# beside it are what those modules import: torchdata (StatefulDataLoader), tyro (text_datasets.py
# imports it), spmd_types==0.2.3 (components/loss.py), torch_checkpointing (components/checkpointer)
# and datasets<4.8.0 with its own dependencies. Idempotent: a second run only checks the stamp.
#   scripts/torchtitan_oracle_env.sh      -> prints the oracle's python path on success
set -euo pipefail
cd "$(dirname "$0")/.."
TORCHTITAN_VERSION=0.3.0
base_py=${BASE_PYTHON:-.venv/bin/python}
venv=.venv-titan
[ -x "$base_py" ] || { echo "warning: $base_py missing; no torchtitan oracle" >&2; exit 1; }
if command -v flock >/dev/null; then exec 9>".venv-titan.lock"; flock 9; fi
stamp="$venv/.oracle-torchtitan-$TORCHTITAN_VERSION-v1"
if [ ! -f "$stamp" ]; then
  rm -rf "$venv"
  base_site=$("$base_py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  base_exe=$("$base_py" -c "import sys; print(sys._base_executable)")
  "$base_exe" -m venv --without-pip "$venv"
  own_site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$base_site" >"$own_site/zz_forensics_base.pth"
  pip_() { "$venv/bin/python" -m pip install -q --no-compile "$@" 2>&1 | grep -v "is ignored" || true; }
  pip_ --no-deps --ignore-installed "torchtitan==$TORCHTITAN_VERSION"
  pip_ --no-deps --ignore-installed torchdata==0.11.0 spmd_types==0.2.3 torch_checkpointing
  pip_ --ignore-installed "datasets>=3.6.0,<4.8.0" tyro
  "$venv/bin/python" -c "
import importlib.metadata as md, sys
assert md.version('torchtitan') == '$TORCHTITAN_VERSION', md.version('torchtitan')
assert md.version('torch').startswith('2.13.0'), md.version('torch')
import datasets, torchtitan.hf_datasets.text_datasets, torchtitan.components.checkpoint
assert datasets.__file__.startswith(sys.prefix), datasets.__file__
" || { echo "warning: torchtitan $TORCHTITAN_VERSION is not complete in $venv" >&2; exit 1; }
  touch "$stamp"
fi
echo "$PWD/$venv/bin/python"
