"""Run the accident battery (`forensics_testing.accidents`) on copies of a run and count what
went wrong.

    .venv/bin/python scripts/accidents.py [--base demo-run] [--jobs 2] [--only PATTERN]

Prints one line per accident that went wrong, then the counts per kind (traceback, hang, silent
wrong, half-written, not one line, refused wrongly, unclear). Exit status 1 when any count is not
zero. `--base` is a run directory such as `bash scripts/demo.sh` builds (demo-run/); without one,
the tests' small run is generated first. The same accidents run as pytest cases in
tests/forensics/test_accident_battery.py.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout

from forensics_testing.accidents import (  # noqa: E402
    KINDS,
    base_info,
    battery,
    prepare_base,
    run_one,
)
from forensics_testing.small_run import SMALL  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base",
        type=Path,
        default=None,
        help="a run directory (demo-run/); default: generate a small run",
    )
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", default="*", help="glob over accident names")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="forensics-accidents-"))
    cache = work / "cache"
    t0 = time.monotonic()
    base = prepare_base(args.base.resolve() if args.base else SMALL, work, cache)
    accidents = [a for a in battery(base_info(base)) if fnmatch.fnmatch(a.name, args.only)]
    print(
        f"{len(accidents)} accidents on copies of {args.base or 'a generated run'} "
        f"({args.jobs} at a time)",
        flush=True,
    )
    verdicts = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, a, base, work, cache) for a in accidents]
        for fut in concurrent.futures.as_completed(futures):
            v = fut.result()
            verdicts.append(v)
            for kind, text in v.problems.items():
                print(f"  {kind:<15} {v.accident.name}: {text}", flush=True)
    kinds = list(KINDS)
    counts = {k: sum(k in v.problems for v in verdicts) for k in kinds}
    slowest = max(verdicts, key=lambda v: v.seconds)
    print(f"\nbad inputs tried: {len(verdicts)}")
    for k in kinds:
        print(f"{k + ':':<17}{counts[k]}")
    print(
        f"slowest: {slowest.accident.name} ({slowest.seconds:.1f} s); "
        f"battery {time.monotonic() - t0:.0f} s"
    )
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if any(counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
