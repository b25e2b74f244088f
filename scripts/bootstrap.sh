#!/usr/bin/env bash
# Create ./.venv and install forensics with everything the demo and the tests need.
# Idempotent: a second run only checks. torch is pinned to the CPU wheel and installed first,
# so nothing that depends on it pulls a multi-GB CUDA build.
#   scripts/bootstrap.sh          runtime + embeddings + tests
#   scripts/bootstrap.sh bench    also the benchmark anchors (datatrove, spaCy)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
extras="embed,test"
[ "${1:-}" = "bench" ] && extras="embed,test,bench"
pins=scripts/harvest-pins.txt  # the versions the demo data is harvested from (see the file)
stamp=".venv/.forensics-$(cat pyproject.toml "$pins" | sha1sum | cut -c1-12)-${extras//,/-}"
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ ! -f "$stamp" ]; then
  # torch from the CPU wheel pip finds on disk; --no-compile: byte-compiling torch's ~20k
  # modules is most of its install time (Python compiles what it imports, on first import).
  .venv/bin/python -m pip install -q --no-compile torch==2.13.0 2>&1 | grep -v "is ignored" || true
  # Everything else through uv (same resolution as pip here, several times faster); it keeps
  # the installed torch, which satisfies the pin. pip when uv cannot be had.
  .venv/bin/python -m pip install -q uv==0.13.9 2>&1 | grep -v "is ignored" || true
  if [ -x .venv/bin/uv ]; then
    install=(.venv/bin/uv pip install -q --python .venv/bin/python)
  else
    install=(.venv/bin/python -m pip install -q)
  fi
  "${install[@]}" -c "$pins" -e ".[$extras]" 2>&1 | grep -v "is ignored" || true
  # OLMo-core, the oracle of the repeated-n-gram rule (tests/forensics/score/test_scan_repeats.py), without its
  # dependencies: they would downgrade rich and huggingface_hub and add cloud clients.
  "${install[@]}" --no-deps ai2-olmo-core==3.0.0 2>&1 | grep -v "is ignored" || true
  # fail loudly if an install failed (hypothesis: the test extra's fuzz suite, tests/forensics/test_fuzz.py)
  .venv/bin/python -c "import forensics, torch, sentence_transformers, hypothesis"
  touch "$stamp"
fi
# The default embedding model: model2vec distilled from the packaged MiniLM, offline, once per
# machine (~2 CPU-minutes; cached under ~/.cache/forensics/models, or $FORENSICS_MODEL_DIR).
# It runs in the background while the rest of the set-up (and the demo's run build, or the test
# oracles' venvs) goes on; whoever needs the model first waits on its lock
# (forensics/cluster/static_model.py). FORENSICS_DISTILL=wait: distil in the foreground.
distill=(env HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python -m forensics.cluster.static_model)
if [ "${FORENSICS_DISTILL:-background}" = wait ]; then
  "${distill[@]}" >/dev/null
else
  nohup "${distill[@]}" >.venv/.static-model.log 2>&1 </dev/null &
fi
# The scorers' compiled loops (forensics/score/utf8_scan.py, doc_counts.py): numba compiles
# them on first use (~16 CPU-s) and caches the machine code beside the source; do it here, not
# in the first run.
.venv/bin/python -c "import polars as pl; from forensics.score import score_table; score_table(pl.DataFrame({'text': ['warm up the kernels']}))"
