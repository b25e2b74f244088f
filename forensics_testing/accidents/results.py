"""What a good answer is, for the accidents that may (or must) succeed: each is checked against
the run's own files or the library's replay, so an exit 0 with a wrong or empty result counts as
silent wrong. Keyed by accident name; `expected.apply` attaches them."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataloaders.run_config import config_from_dict
from forensics.replay import open_replayer

Check = Callable[[Path, subprocess.CompletedProcess], "str | None"]
_ITERATION = re.compile(r"^\s*iteration\s+(\d+)/\s*\d+ \|.*lm loss: [0-9.E+-]+ \|", re.M)


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def triage_reads_the_whole_lines(run: Path, proc: subprocess.CompletedProcess) -> str | None:
    """A log cut mid-line: every whole iteration line is read, the cut one is not."""
    whole = [int(m) for m in _ITERATION.findall((run / "logs/train.log").read_text())]
    summary = _json(run / "t" / "summary.json")
    if summary["rows"] != len(whole) or summary["last_step"] != whole[-1]:
        return f"read {summary['rows']} rows to step {summary['last_step']}, not {len(whole)}"
    return None


def triage_healthy_run(run: Path, proc: subprocess.CompletedProcess) -> str | None:
    """The base run's log: its whole curve, read as the first triage read it."""
    summary = _json(run / "t" / "summary.json")
    base = _json(run / "triage" / "summary.json")
    same = {k: summary[k] for k in ("rows", "first_step", "last_step", "status")}
    want = {k: base[k] for k in ("rows", "first_step", "last_step", "status")}
    return None if same == want else f"triage gave {same}, the run's own triage {want}"


def _library_replay(run: Path, first: int, last: int, edit: Callable[[dict], None] | None = None):
    """The replay table of the run copy's config (edited in memory), from the library."""
    import yaml

    raw = yaml.safe_load((run / "forensics.yaml").read_text())
    if edit is not None:
        edit(raw)
    config = config_from_dict(raw, base_dir=run, source=None)
    return open_replayer(config).replay(first, last, text=False, progress=False)


def replayed_as_the_library(out: str, edit: Callable[[dict], None] | None = None) -> Check:
    """`out` holds the window's iterations with the documents the library replays (with `edit`
    applied to the config: the setting the accident spells differently, written as Megatron
    reads it)."""

    def check(run: Path, proc: subprocess.CompletedProcess) -> str | None:
        import polars as pl

        table = pl.read_parquet(run / out)
        first, last = int(table["iteration"].min()), int(table["iteration"].max())
        truth = _json(run / "truth.json")["spike_iteration"]
        if (first, last) != (truth - 1, truth):
            return f"iterations {first}-{last}, not the window {truth - 1}-{truth}"
        want = _library_replay(run, first, last, edit)
        keys = ["iteration", "position", "dataset", "doc_id", "token_start", "token_end"]
        if not table.select(keys).equals(want.select(keys)):
            return "its documents are not the ones the library replays"
        return None

    return check


def split_padded(raw: dict) -> None:
    raw["data"]["split"] = "98,2,0"


def texts_as_uint16(run: Path, proc: subprocess.CompletedProcess) -> str | None:
    """The .idx says int16 where the data is uint16: every id of this vocabulary is below
    32768, so the replay must be the one of the data read as uint16, every text decoded."""
    import shutil
    import tempfile

    import polars as pl

    table = pl.read_parquet(run / "w.parquet")
    step = _json(run / "truth.json")["spike_iteration"]
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "run"
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("spike", "triage", "w.parquet"))
        for idx in (copy / "data").glob("*.idx"):
            data = bytearray(idx.read_bytes())
            if data[17] == 3:  # int16: the code the accident wrote
                data[17] = 8  # back to uint16
                idx.write_bytes(bytes(data))
        want = _library_replay(copy, step - 1, step)
    keys = ["doc_id", "token_start", "token_end"]
    if not table.select(keys).equals(want.select(keys)):
        return "the documents differ from the uint16 replay"
    return None if table["text"].null_count() == 0 else "some texts are missing"


def manifest_one_url_column(run: Path, proc: subprocess.CompletedProcess) -> str | None:
    import polars as pl

    table = pl.read_parquet(run / "m.parquet")
    if table.columns != ["doc_id", "url"]:
        return f"columns {table.columns}, not doc_id and url once"
    urls = table["url"].to_list()
    return None if urls == [f"u{i}" for i in range(len(urls))] else "urls out of line order"


def scored_rows(expected: int) -> Check:
    """score wrote one row per usable document (and said which lines it left out)."""

    def check(run: Path, proc: subprocess.CompletedProcess) -> str | None:
        import polars as pl

        rows = pl.read_parquet(run / "s.parquet").height
        return None if rows == expected else f"{rows} rows scored, not {expected}"

    return check


def spike_found_the_truth(out: str) -> Check:
    """The spike blames the crawl batch the run was built dirty with, and blocks its documents;
    the report and skip.json agree."""

    def check(run: Path, proc: subprocess.CompletedProcess) -> str | None:
        truth = _json(run / "truth.json")
        report, skip = _json(run / out / "report.json"), _json(run / out / "skip.json")
        if truth["dirty_crawl_batch"] not in str(report["culprit_name"]):
            return f"blames {report['culprit_name']!r}, not {truth['dirty_crawl_batch']}"
        blocked = set(skip["documents"].get(truth["dirty_dataset"], []))
        if not set(truth["dirty_doc_ids"]) <= blocked:
            return "the block list misses dirty documents"
        if report["skip"]["iterations"] != skip["iterations"]:
            return "report.json and skip.json disagree on the skipped iterations"
        return None

    return check


def whole_set_or_old(out: str) -> Check:
    """A spike that ran under a disk limit and said ok: a whole, agreeing set was published."""

    def check(run: Path, proc: subprocess.CompletedProcess) -> str | None:
        if (run / out / ".cache" / "publish.json").exists():
            return "a publish journal is left"
        return spike_found_the_truth(out)(run, proc)

    return check


def check_skip_states_the_skip(run: Path, proc: subprocess.CompletedProcess) -> str | None:
    """check-skip on the run's own skip file says exactly the skip file's iterations."""
    ranges = _json(run / "spike" / "skip.json")["iterations"]
    spelled = ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in ranges)
    return says_all(f"drops exactly iterations {spelled}")(run, proc)


def says_all(*texts: str) -> Check:
    def check(run: Path, proc: subprocess.CompletedProcess) -> str | None:
        joined = " ".join((proc.stdout + proc.stderr).split())
        missing = [t for t in texts if t not in joined]
        return f"does not say {missing[0]!r}" if missing else None

    return check


def watch_saw_the_spike(run: Path, proc: subprocess.CompletedProcess) -> str | None:
    """One poll of the run's log: the whole log read, the spike at the run's spike iteration
    among the events."""
    truth = _json(run / "truth.json")["spike_iteration"]
    state = _json(run / "w" / "state.json")
    if state["position"]["offset"] != (run / "logs/train.log").stat().st_size:
        return "the state does not stand at the log's end"
    events = [json.loads(line) for line in (run / "w" / "events.jsonl").read_text().splitlines()]
    spikes = [e for e in events if e.get("kind") == "spike" and e.get("step") == truth]
    return None if spikes else f"no spike event at step {truth}: {events[:2]}"


def prometheus_written(run: Path, proc: subprocess.CompletedProcess) -> str | None:
    path = run / "no" / "dir" / "p.prom"
    if not path.is_file() or "forensics" not in path.read_text():
        return "no metrics in no/dir/p.prom"
    return None


RESULTS: dict[str, Check] = {
    "triage: log truncated mid-line": triage_reads_the_whole_lines,
    "triage: --config missing": triage_healthy_run,
    "triage: --seq-length -1": triage_healthy_run,
    "replay: --out in a missing dir": replayed_as_the_library("new/dir/w.parquet"),
    "replay --text: .idx dtype code swapped at the same width": texts_as_uint16,
    "replay: split '98,2' (Megatron pads it with 0)": replayed_as_the_library(
        "w.parquet", split_padded
    ),
    "replay: a good replay": replayed_as_the_library("w.parquet"),
    "manifest: --fields url,url": manifest_one_url_column,
    "score: text not a string": scored_rows(0),  # no line holds text to score
    "score: empty JSONL": scored_rows(0),
    "spike: a good run": spike_found_the_truth("s"),
    "spike: --force over the old run": spike_found_the_truth("spike"),
    "check-skip: the run's own skip file": check_skip_states_the_skip,
    "spike: disk full at 150000 B": whole_set_or_old("s"),
    "spike --force: disk full at 150000 B": whole_set_or_old("spike"),
    "watch: log missing": says_all("nope.log"),
    "watch: --prometheus in a missing dir": prometheus_written,
    "watch: binary log": says_all("train.log"),
    "watch: one poll of the real log": watch_saw_the_spike,
}

# Checks that fail today for a cause outside this battery, each with the cause: the battery's
# test expects them to fail (strictly: when the cause is fixed, the entry must go).
PENDING: dict[str, str] = {}
