"""Build the demo's Megatron run (or a variant) from text found on this machine.

    .venv/bin/python scripts/build_demo_run.py --out demo-run [--seed 1234] [--dirty-kind mixed]
        [--config-copy configs/demo.yaml]

See forensics_testing/demo/build.py for what is real (data, tokenizer, order) and what is
simulated (the training log's loss curve).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from dataloaders.atomic import write_text_atomic
from forensics_testing.demo.build import DemoSpec, build_run, relocated_config  # noqa: E402
from forensics_testing.demo.dirty import DIRTY_KINDS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("demo-run"), help="run directory")
    parser.add_argument("--seed", type=int, default=DemoSpec.seed)
    parser.add_argument("--dirty-kind", choices=DIRTY_KINDS, default=DemoSpec.dirty_kind)
    parser.add_argument(
        "--config-copy",
        type=Path,
        help="also write the config here, with paths relative to it (configs/demo.yaml)",
    )
    args = parser.parse_args()
    spec = replace(DemoSpec(), seed=args.seed, dirty_kind=args.dirty_kind)
    t0 = time.perf_counter()
    truth = build_run(args.out, spec)
    if args.config_copy is not None:
        import os

        rel = os.path.relpath(args.out.resolve(), args.config_copy.resolve().parent)

        write_text_atomic(args.config_copy, relocated_config(spec, rel))
    print(
        f"built {args.out} in {time.perf_counter() - t0:.1f} s: "
        f"{sum(truth['documents'].values())} documents, {sum(truth['tokens'].values())} tokens; "
        f"dirty crawl batch {truth['dirty_crawl_batch']} ({truth['dirty_kind']}) enters at "
        f"iteration {truth['switch_iteration']}, simulated spike at {truth['spike_iteration']}"
    )


if __name__ == "__main__":
    main()
