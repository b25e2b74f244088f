"""`forensics spike`: from a spike's iteration to the culprit, the rollback and the skip plan.

    run.py          run_spike: the stages in runbook order
    options.py      SpikeOptions (what the command takes), the settings each stage is given
                    (Engine, EmbedSettings, SkipSettings, RerunArgs), SpikeResult (what it gives
                    back)
    run_context.py  SpikeRun: the config, step, replayer, windows, cache, clock and notes of one
                    run (no options: a stage takes those it reads as arguments)
    stages.py       replay, decode, score, cluster, model: tables in, one table out, cached
    blame.py        the culprit documents (block list) and the rollback
    exposure.py     the culprit's exposure in the skip scope and ahead
    skipping.py     the skip plan (forensics.skip does the exact flag work)
    reporting.py    the report, then every output published as one step (outdir.py)
    restart_files.py  restart-<trainer>.flags and megatron_args.txt

Each expensive stage's table is cached under `<out>/.cache/` by a hash of its inputs, so a rerun
with another threshold, `--after` or `--skip-ahead` redoes only the cheap end.
"""

from forensics.spike.blame import documents_by_dataset, onset_iteration
from forensics.spike.exposure import ahead_advice, ahead_summary
from forensics.spike.options import SpikeOptions, SpikeResult
from forensics.spike.outdir import MARKER, check_output_dir
from forensics.spike.run import run_spike
from forensics.window import choose_baseline, crossings, stage_starts

__all__ = [
    "MARKER",
    "SpikeOptions",
    "SpikeResult",
    "ahead_advice",
    "ahead_summary",
    "check_output_dir",
    "crossings",
    "documents_by_dataset",
    "onset_iteration",
    "choose_baseline",
    "run_spike",
    "stage_starts",
]
