#!/usr/bin/env bash
# The README's first command, end to end from a fresh clone (no downloads besides the venv):
#   1. set up ./.venv (scripts/bootstrap.sh);
#   2. build a small but real Megatron run from text on this machine (demo-run/: BPE tokenizer,
#      .bin/.idx, manifests with crawl batches, a dirty crawl batch entering at a mixture switch,
#      a training log whose loss curve is SIMULATED with a malignant spike where the dirt lands);
#   3. triage the log (forensics triage), then run the runbook command from the job's directory
#      (forensics spike --step 2260 --window 300, config found as ./forensics.yaml);
#   4. take the report's ACTION: forensics rebuild spike-2260 (the dirty batch keeps coming, so
#      its documents are removed: filtered .bin/.idx and the restart's flags in rebuild-2260/);
#      print where everything is (the report's first screen is printed above).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
start=$SECONDS
STEP=2260
echo "== 1/4 building the demo run (demo-run/) from text found on this machine"
.venv/bin/python scripts/build_demo_run.py --out demo-run --config-copy configs/demo.yaml
cd demo-run
echo
echo "== 2/4 forensics triage logs/train.log (the loss curve is simulated; the data is real)"
../.venv/bin/forensics triage logs/train.log --out triage --checkpoints checkpoints --force \
  --config forensics.yaml
echo
echo "== 3/4 forensics spike --step $STEP --window 300 (runbook form: ./forensics.yaml)"
# --force: a previous demo's spike-$STEP/ is ours to overwrite; its cache makes the rerun fast.
../.venv/bin/forensics spike --step "$STEP" --window 300 --embed-cap 1200 --force
echo
echo "== 4/4 forensics rebuild spike-$STEP (the report's ACTION: the culprit keeps coming)"
../.venv/bin/forensics rebuild "spike-$STEP" --force
echo
echo "demo finished in $((SECONDS - start)) s"
echo "report: $(pwd)/spike-$STEP/report.html (also report.md, report.json)"
echo "skip list: $(pwd)/spike-$STEP/skip.json, flags to paste: $(pwd)/spike-$STEP/megatron_args.txt"
echo "rebuilt data and restart flags: $(pwd)/rebuild-$STEP/ (rebuild.md)"
