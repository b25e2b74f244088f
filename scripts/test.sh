#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite, then lint.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/olmo_oracle_env.sh  # ai2-olmo-core in .venv-olmo: the OLMo-core tests' oracle
# The MosaicML streaming oracle (its own venv: streaming pins numpy<2.2, transformers<5).
bash scripts/mosaic_oracle_env.sh >/dev/null || echo "warning: no streaming oracle; its tests will skip"
# The Megatron-Bridge oracle (its own venv: Bridge requires Python 3.12 and GPU-only packages).
bash scripts/bridge_oracle_env.sh >/dev/null || echo "warning: no Megatron-Bridge oracle; its tests will skip"
# The torchtitan oracle (its own venv: torchtitan 0.3.0 requires datasets<4.8).
bash scripts/torchtitan_oracle_env.sh >/dev/null || echo "warning: no torchtitan oracle; its tests will skip"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
.venv/bin/python -m pytest -n 2 --dist worksteal --durations=15 "$@"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
