#!/usr/bin/env bash
# Build .venv-mosaic/: MosaicML streaming 0.13.0 with torch, the oracle for the MosaicML tests
# (tests/dataloaders/mosaic/, tests/forensics/spike/test_mosaic_spike.py).
#
# streaming pins numpy<2.2 and transformers<5, which clash with the project's venv, so it gets its
# own environment. torch is the same 2.13.0 (the CPU wheel pip finds on disk); the constraint file
# below stops anything from pulling another torch. streaming is installed without its cloud-storage
# SDKs but boto3 (gcs, azure, oci, paramiko: the tests read local MDS directories, and S3 remotes on
# a moto server through boto3, tests/dataloaders/storage/; streaming imports the SDKs lazily) and without torchvision (PyPI's wheel is a CUDA build that fails to
# load against CPU torch; tests/oracles/mosaic_import.py imports streaming.base without the
# package __init__ that pulls streaming.vision). Idempotent: a second run only checks the stamp.
#   scripts/mosaic_oracle_env.sh        -> prints the oracle's python path on success
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
venv=.venv-mosaic
# One builder at a time (pytest -n 2 workers may both ask for it on a fresh machine).
if command -v flock >/dev/null; then exec 9>".venv-mosaic.lock"; flock 9; fi
stamp="$venv/.oracle-streaming-0.13.0-v3"
if [ ! -f "$stamp" ]; then
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  pins="$venv/constraints.txt"
  printf 'torch==2.13.0\nnumpy<2.2\ntransformers<5\n' >"$pins"
  pip_() { "$venv/bin/python" -m pip install -q --no-compile -c "$pins" "$@" 2>&1 | grep -v "is ignored" || true; }
  pip_ torch==2.13.0
  pip_ --no-deps mosaicml-streaming==0.13.0
  pip_ "numpy>=1.21.5,<2.2" "transformers>=4.21.3,<5" "xxhash<4" zstd Brotli python-snappy tqdm \
    catalogue filelock pillow boto3
  "$venv/bin/python" -c "import sys; sys.path.insert(0, 'tests/oracles'); import mosaic_import
b = mosaic_import.import_streaming_base(); import streaming, torch
assert streaming.__version__ == '0.13.0', streaming.__version__" >&2
  touch "$stamp"
fi
echo "$PWD/$venv/bin/python"
