#!/usr/bin/env bash
# Build .venv-bridge/: NVIDIA Megatron-Bridge 0.6.2, the oracle that writes the Bridge save folders
# (run_config.yaml, train_state.pt, the trackers) and parses the overrides of the Megatron-Bridge
# tests (tests/dataloaders/megatron/test_bridge_save.py).
#
# Why not Python 3.12, which megatron-bridge 0.6.2 requires: its code needs torch, and PyPI's only
# Linux torch 2.13.0 wheel for cp312 is the CUDA 13 build (it requires cuda-toolkit, cuDNN, NCCL,
# several GB); the CPU wheels live on PyTorch's own index, which these machines do not reach. So
# this venv runs Bridge on the project's Python 3.11 and sees the project's torch 2.13.0 (CPU)
# through a .pth file placed AFTER its own site-packages (as .venv-olmo does). Two shims from
# tests/oracles/bridge_site/ make that work, each documented in its file: `typing.override` from
# typing_extensions (the one 3.12 feature reached), and an import-only Transformer Engine that only
# Bridge's LoRA module can import (TE is CUDA-only; megatron-core sees it absent, as on any CPU
# host). Bridge, megatron-core 0.19.2 (its megatron.training config classes) and what their config
# modules import at module level are installed with --no-deps and pinned; Bridge's GPU-only
# dependencies are not installed. Idempotent: a second run only checks the stamp.
#   scripts/bridge_oracle_env.sh        -> prints the oracle's python path on success
set -euo pipefail
cd "$(dirname "$0")/.."
base_py=${BASE_PYTHON:-.venv/bin/python}
venv=.venv-bridge
[ -x "$base_py" ] || { echo "warning: $base_py missing; no Megatron-Bridge oracle" >&2; exit 1; }
if command -v flock >/dev/null; then exec 9>".venv-bridge.lock"; flock 9; fi
stamp="$venv/.oracle-megatron-bridge-0.6.2-v1"
if [ ! -f "$stamp" ]; then
  rm -rf "$venv"
  base_site=$("$base_py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  base_exe=$("$base_py" -c "import sys; print(sys._base_executable)")
  "$base_exe" -m venv --without-pip "$venv"
  own_site=$("$venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  echo "$base_site" >"$own_site/zz_forensics_base.pth"
  cp -r tests/oracles/bridge_site/transformer_engine tests/oracles/bridge_site/bridge_py311.py "$own_site/"
  echo "import bridge_py311" >"$own_site/zzz_bridge_py311.pth"  # after the base site: typing_extensions
  pip_() { "$venv/bin/python" -m pip install -q --no-compile --no-deps --ignore-requires-python "$@" 2>&1 | grep -v "is ignored" || true; }
  pip_ megatron-bridge==0.6.2 megatron-core==0.19.2 triton==3.7.1 \
    omegaconf==2.4.0 hydra-core==1.3.8 antlr4-python3-runtime==4.9.3 einops==0.8.2 \
    megatron-energon==7.4.1 braceexpand==0.1.7 filetype==1.2.0 mfusepy==3.1.1 rapidyaml==0.15.2 \
    webdataset==1.0.2 multi-storage-client==1.3.1 opentelemetry-api==1.45.3 xattr==1.3.1 \
    lark==1.3.1 wcmatch==10.2.1 bracex==3.2.4 prettytable==3.19.0 psutil==7.2.2 \
    pyroute2==0.9.7 tzdata==2025.3 deprecation==2.1.0 ipython==9.19.1 traitlets==5.16.1
  # what is installed, without importing it (Bridge's import takes ~20 s of CPU; the writer pays it)
  "$venv/bin/python" -c "
import importlib.metadata as md, importlib.util as iu, sys
assert md.version('megatron-bridge') == '0.6.2', md.version('megatron-bridge')
assert md.version('torch').startswith('2.13.0'), md.version('torch')
for name in ('megatron.bridge', 'megatron.core', 'megatron.training', 'hydra', 'omegaconf', 'triton'):
    spec = iu.find_spec(name)
    assert spec is not None and (spec.origin or spec.submodule_search_locations[0]).startswith(sys.prefix), name
" || { echo "warning: Megatron-Bridge 0.6.2 is not complete in $venv" >&2; exit 1; }
  touch "$stamp"
fi
echo "$PWD/$venv/bin/python"
