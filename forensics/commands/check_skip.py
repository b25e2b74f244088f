"""`forensics check-skip`: is this skip.json valid for this run, and does it say one thing?

A skip list names iterations, and iteration numbers mean other batches as soon as the config,
the blend or a data file changes. Before a restart, check-skip recomputes the run's fingerprint
(config hash, data file sizes, index hashes) and refuses a skip file made for another run; it
also parses both flag strings back and checks they drop exactly the listed iterations and the
listed sample ranges.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from forensics.commands.options import ConfigOption, MegatronArgsOption
from forensics.errors import ForensicsError

if TYPE_CHECKING:
    from forensics.config import RunConfig

REQUIRED = ("iterations", "samples", "megatron_lm", "megatron_deepspeed", "fingerprint")


def read_skip_file(path: Path) -> dict[str, Any]:
    """skip.json as written by `forensics spike`; one-line errors for anything else."""
    import json

    if not path.is_file():
        raise ForensicsError(f"{path}: skip file not found")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ForensicsError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise ForensicsError(f"{path}: not a skip file (expected a JSON object)")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ForensicsError(
            f"{path}: not a skip file from forensics spike (no {', '.join(missing)})"
        )
    return data


def check_skip(path: Path, config: Path | RunConfig) -> dict[str, Any]:
    """Raise ForensicsError unless `path` fits the run of `config` (a YAML path, or a RunConfig
    such as one from --megatron-args); returns the skip dict."""
    import json

    from forensics.config import RunConfig, load_config
    from forensics.replay import open_replayer
    from forensics.skip import (
        expand,
        fingerprint_differences,
        parse_megatron_deepspeed,
        parse_megatron_lm,
        sample_ranges,
    )

    skip = read_skip_file(path)
    if isinstance(config, RunConfig):
        run, label = config, describe_config(config)
    else:
        run, label = load_config(config), str(config)
    replayer = open_replayer(run)
    now = json.loads(json.dumps(replayer.fingerprint(), default=str))
    diffs = fingerprint_differences(skip["fingerprint"], now)
    if diffs:
        more = f" (and {len(diffs) - 3} more)" if len(diffs) > 3 else ""
        raise ForensicsError(
            f"{path}: made for another run than {label}: {'; '.join(diffs[:3])}{more}"
        )
    ranges = [tuple(r) for r in skip["iterations"]]
    want = set(expand(ranges))
    if parse_megatron_lm(skip["megatron_lm"]) != want:
        raise ForensicsError(f"{path}: megatron_lm does not list the same iterations (edited?)")
    ds = skip["megatron_deepspeed"]
    resume = int(ds.get("resume_from", skip.get("rollback", {}).get("iteration", 0)))
    if parse_megatron_deepspeed(ds["flag"], resume) != want:
        raise ForensicsError(
            f"{path}: megatron_deepspeed does not drop the same batches from iteration {resume} "
            "(edited?)"
        )
    if ranges:
        last = max(b for _, b in ranges)
        if last > replayer.last_iteration:
            raise ForensicsError(
                f"{path}: skips iteration {last}, past the end of training "
                f"({replayer.last_iteration})"
            )
        first = min(a for a, _ in ranges)
        expected = sample_ranges(replayer.iteration_samples(first, last), ranges)
        if expected != skip["samples"]:
            raise ForensicsError(f"{path}: the sample ranges do not match the iterations (edited?)")
    return skip


def describe_config(config: RunConfig) -> str:
    """Where a config came from, for messages: its file, or the Megatron arguments."""
    return str(config.source) if config.source is not None else "the given --megatron-args"


def check_skip_command(
    skip_file: Annotated[Path, typer.Argument(help="skip.json written by forensics spike.")],
    config: ConfigOption = None,
    megatron_args: MegatronArgsOption = None,
) -> None:
    """Refuse a skip file made for another run (config, blend or data files changed); check
    that both flag strings drop exactly the listed iterations."""
    from rich.markup import escape

    from forensics.megatron_args import resolve_run_config
    from forensics.report.terminal import make_console
    from forensics.skip import expand

    run = resolve_run_config(config, megatron_args)
    skip = check_skip(skip_file, run)
    n = len(expand([tuple(r) for r in skip["iterations"]]))
    rb = skip.get("rollback", {}).get("iteration")
    where = escape(describe_config(run))
    make_console().print(
        f"[green]ok[/]: {escape(str(skip_file))} fits {where}: {n} iterations "
        f"in {len(skip['iterations'])} range(s)"
        + (f", for a restart from checkpoint iteration {rb}" if rb is not None else "")
    )
