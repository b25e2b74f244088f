"""The loop closed by a real trainer: a data-caused spike in OLMo-core's own Trainer (CPU, gloo),
followed live by `forensics watch`, named by `forensics triage` and `forensics spike` (with the
model's view from the trainer's own checkpoint), and a restart from the rollback checkpoint with
`restart-olmo-core.flags` that skips exactly the burst and comes back without the spike.

    .venv/bin/python scripts/real_loop_olmo.py OUT [--steps 360 --burst 251 270 ...]

1. Token files (uint16, the 256 byte values, EOS 256, PAD 257): the real-spike recipe's clean
   corpus (docstrings of Python's standard library, scripts/real_spike.py), documents ending in
   EOS. The instances OLMo-core's loader hands out at the burst steps come from the library itself
   (scripts/olmo_loop_train.py --plan); in the burst file each of those instances is one
   document of a repeated short n-gram (period 1-6 printable bytes), in the control file the same
   instances hold clean text that is otherwise unused. Everything else is the same bytes.
2. Burst run and control run: scripts/olmo_loop_train.py in .venv-olmo, same seed, the trainer's
   console log to OUT/<run>/train.log, checkpoints every --save-interval steps. `forensics watch`
   follows the burst run's log while it trains.
3. `forensics triage` on the log, `forensics spike --config` (the run config read from the save
   folder, plus the byte tokenizer) `--checkpoint <save>/step<R>` `--skip-ahead` at the end of
   triage's spike: the data side names the culprit, the model's view (the checkpoint before
   the burst) says whether it choked on it. No cluster is chosen by hand.
4. The restart: a new save folder, `--trainer.load_path=<save>/step<rollback>` and the words of
   restart-olmo-core.flags, as overrides of the training script. Its log's "Skipping training on
   step N intentionally..." lines must be exactly the skip plan's steps.

Writes OUT/summary.json and prints the numbers: peak training loss after the burst starts in the
burst run, the control and the restart, the skipped steps, wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.olmo_core.saved_config import run_config_from_save_folder
from forensics.skip import expand
from forensics.triage.formats.olmo_core import skipped_steps
from forensics.triage.readers import read_log

ROOT = Path(__file__).resolve().parents[1]
OLMO_PY = ROOT / ".venv-olmo" / "bin" / "python"
TRAIN = ROOT / "scripts" / "olmo_loop_train.py"
EOS, PAD = 256, 257
MIN_REPEATS = 32
# what the summary keeps of each blamed cluster (report.json's names)
CULPRIT_KEYS = ("id", "docs", "baseline_docs", "new_in_window", "flagged_rate",
                "rest_flagged_rate", "baseline_flagged_rate", "data_verdict", "verdict",
                "loss_z", "top_reasons")  # fmt: skip
sys.path.insert(0, str(ROOT / "scripts"))


def byte_tokenizer(path: Path) -> None:
    """A tokenizers JSON whose id of every byte is the byte's value (no merges), EOS and PAD."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()  # the 256 printable stand-ins GPT-2's byte level uses
    table = _bytes_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    assert set(vocab) == set(alphabet)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|eos|>", "<|pad|>"])
    assert tok.token_to_id("<|eos|>") == EOS and tok.token_to_id("<|pad|>") == PAD
    tok.save(str(path))


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the one ByteLevel uses)."""
    keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
    chars, n = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + n)
            n += 1
    return dict(zip(keep, map(chr, chars), strict=True))


def streams(seq: int) -> tuple[np.ndarray, np.ndarray]:
    """(training stream, reserve): the corpus's documents, each followed by EOS; the last 5%
    of the documents are the reserve the control's replacement text comes from."""
    from real_spike import docstrings

    docs = docstrings()
    cut = int(len(docs) * 0.95)

    def join(part: list[bytes]) -> np.ndarray:
        return np.concatenate([np.append(np.frombuffer(d, np.uint8), EOS) for d in part])

    train, reserve = join(docs[:cut]), join(docs[cut:])
    return train[: len(train) // seq * seq].astype(np.uint16), reserve.astype(np.uint16)


def burst_instance(rng: np.random.Generator, seq: int) -> np.ndarray:
    """One document of a repeated printable n-gram filling an instance, then EOS. Periods 1-6
    as in the CPU recipe, capped so every pattern repeats at least MIN_REPEATS times: the
    repetition OLMo 2 traced its spikes to (OLMo-core's instance filter drops an instance from
    the loss at 32 repeats, ai2-olmo-core 3.0.0 olmo_core/data/numpy_dataset.py
    InstanceFilterConfig; this run leaves the filter off, as the runs that spiked did)."""
    period = int(rng.integers(1, max(1, min(6, (seq - 1) // MIN_REPEATS)) + 1))
    pattern = rng.integers(33, 127, period)
    return np.append(np.tile(pattern, seq // period + 1)[: seq - 1], EOS).astype(np.uint16)


def write_data(out: Path, a: argparse.Namespace) -> dict[str, Any]:
    """The burst and control token files; returns the burst's instances per step."""
    train, reserve = streams(a.seq)
    for name in ("burst", "control"):
        (out / "data" / name).mkdir(parents=True, exist_ok=True)
    clean = out / "data" / "control" / "part-0.npy"
    train.tofile(clean)
    steps = list(range(a.burst[0], a.burst[1] + 1))
    spec = spec_for(out, a, "plan", clean)
    done = run_checked([str(OLMO_PY), str(TRAIN), str(spec), "--plan", *map(str, steps)])
    plan = {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
    slots = sorted(i for v in plan.values() for i in v)
    assert len(reserve) >= len(slots) * a.seq, "not enough reserve text for the control"
    burst, control = train.copy(), train.copy()
    rng = np.random.default_rng([a.seed, 2])
    for k, i in enumerate(slots):
        burst[i * a.seq : (i + 1) * a.seq] = burst_instance(rng, a.seq)
        control[i * a.seq : (i + 1) * a.seq] = reserve[k * a.seq : (k + 1) * a.seq]
        if i > 0:  # the document before ends where the slot starts: a burst is whole documents
            burst[i * a.seq - 1] = control[i * a.seq - 1] = EOS
    burst.tofile(out / "data" / "burst" / "part-0.npy")
    control.tofile(clean)
    # each burst instance is one document: its number in the file is the EOS count before it
    ends = np.flatnonzero(burst == EOS)
    doc_ids = sorted(int(np.searchsorted(ends, i * a.seq)) for i in slots)
    return {
        "instances": len(train) // a.seq,
        "burst_instances": len(slots),
        "burst_doc_ids": doc_ids,
        "plan": plan,
    }


def spec_for(out: Path, a: argparse.Namespace, run: str, data: Path, **extra: Any) -> Path:
    spec = {
        "paths": [str(data)],
        "work_dir": str(out / run / "work"),
        "save_folder": str(out / run / "save"),
        "seed": a.seed,
        "lr": a.lr,
        "steps": a.steps,
        "save_interval": a.save_interval,
        "sequence_length": a.seq,
        "batch": a.batch,
        "port": a.port,
        **extra,
    }
    (out / run).mkdir(parents=True, exist_ok=True)
    path = out / run / "spec.json"
    path.write_text(json.dumps(spec, indent=1))
    return path


def run_checked(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), **kw)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {shlex.join(cmd)[:300]}\n{done.stderr[-3000:]}")
    return done


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"  # one thread per trainer: the recipe's set-up
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def train(out: Path, run: str, spec: Path, overrides: list[str]) -> float:
    """One Trainer run to completion, its console log in OUT/<run>/train.log; wall seconds. A run
    that finished in OUT before (its `done` file) is not trained again."""
    done = out / run / "done"
    if done.exists():
        return float(done.read_text())
    start = time.perf_counter()
    with open(out / run / "train.log", "w") as log:
        proc = subprocess.run(
            [str(OLMO_PY), str(TRAIN), str(spec), *overrides],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_env(),
        )
    if proc.returncode != 0:
        tail = (out / run / "train.log").read_text()[-3000:]
        sys.exit(f"the OLMo-core Trainer failed ({run}, exit {proc.returncode}):\n{tail}")
    wall = time.perf_counter() - start
    done.write_text(f"{wall:.1f}")
    return wall


def forensics(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return run_checked([sys.executable, "-m", "forensics.cli", *args], cwd=cwd)


def train_watched(out: Path, run: str, spec: Path) -> tuple[float, Path]:
    """Train while `forensics watch` follows the log; stop the watcher once the log is done."""
    log, watch_dir = out / run / "train.log", out / run / "watch"
    if (out / run / "done").exists():
        return train(out, run, spec, []), watch_dir
    log.touch()
    cmd = [sys.executable, "-m", "forensics.cli", "watch", str(log), "--out", str(watch_dir)]
    cmd += ["--interval", "1", "--no-live", "--recovery-window", "60"]
    watcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=child_env(), text=True)  # fmt: skip
    try:
        wall = train(out, run, spec, [])
        time.sleep(4)  # the watcher's last polls
    finally:
        watcher.send_signal(signal.SIGINT)
        try:
            said, _ = watcher.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            watcher.kill()
            said, _ = watcher.communicate()
    (out / run / "watch-stdout.txt").write_text(said or "")
    return wall, watch_dir


def curve(log: Path) -> dict[int, float]:
    """The trainer's own per-step training loss (train/CE loss), read from its console log."""
    table = read_log(log)
    pairs = zip(table["step"].to_list(), table["loss"].to_list(), strict=True)
    return {s: v for s, v in pairs if v is not None}  # a skipped step logs no loss


def watch_events(watch_dir: Path) -> list[dict[str, Any]]:
    path = watch_dir / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(ln) for ln in lines if ln.strip()]


def spike_onset(out: Path, log: Path, burst: tuple[int, int]) -> tuple[int, dict[str, Any]]:
    """`forensics triage` on the finished log: the spike event that covers the burst (its first
    step and the event)."""
    forensics(
        "triage", str(log), "--out", str(out / "triage"), "--recovery-window", "60", "--force"
    )
    events = json.loads((out / "triage" / "events.json").read_text())
    found = [e for e in _spikes(events) if burst[0] - 2 <= e["step"] <= burst[1] + 10]
    if not found:
        sys.exit(f"triage found no spike near steps {burst[0]}-{burst[1]}: see {out / 'triage'}")
    spike = dict(found[0])
    alarms = [
        e
        for e in events
        if e.get("kind") == "grad_norm_alarm" and e.get("loss_onset_step") == spike["step"]
    ]
    spike["alarm_end_step"] = max((int(e["end_step"]) for e in alarms), default=None)
    return int(spike["step"]), spike


def _spikes(events: Any) -> list[dict[str, Any]]:
    items = events.get("events", events) if isinstance(events, dict) else events
    return [e for e in items if isinstance(e, dict) and "spike" in str(e.get("kind", ""))]


def analyse(out: Path, save: Path, onset: int, event: dict[str, Any]) -> dict[str, Any]:
    """`forensics spike` at the end of triage's spike, its window back to the newest checkpoint
    before the spike (the model's view is read from that checkpoint), the densest iterations
    ahead added to the skip. The run config is read from the save folder. The culprit is the
    spike analysis's own: a run where it names none stops here."""
    import yaml

    config = run_config_from_save_folder(save)
    byte_tokenizer(out / "tokenizer.json")
    config["tokenizer"] = str(out / "tokenizer.json")
    (out / "run.yaml").write_text(yaml.safe_dump(config))
    # the end of the excursion: the peak, or the end of the grad-norm alarm tied to the spike
    # (the stretch of abnormal updates: the data that caused them was drawn within it)
    step = max(int(event.get("peak_step") or event["step"]), event.get("alarm_end_step") or 0)
    before = max(s for s in config["checkpoints"] if s < onset)
    spike_dir = out / "spike"
    cmd = ["spike", "--config", str(out / "run.yaml"), "--step", str(step)]
    cmd += ["--window", str(step - before), "--checkpoint", str(save / f"step{before}")]
    cmd += ["--skip-ahead", "--out", str(spike_dir), "--quiet", "--force"]
    start = time.perf_counter()
    forensics(*cmd)
    skip = json.loads((spike_dir / "skip.json").read_text())
    if not skip.get("culprit_clusters"):
        sys.exit(f"the spike analysis named no culprit: see {spike_dir / 'report.md'}")
    wall = time.perf_counter() - start
    return {"skip": skip, "checkpoint": before, "wall_s": wall}


def restart(out: Path, a: argparse.Namespace, burst_save: Path, skip: dict[str, Any]) -> float:
    """The restart as the skip plan says: a new save folder loading the rollback checkpoint,
    the words of restart-olmo-core.flags as the training script's overrides."""
    words = (out / "spike" / "restart-olmo-core.flags").read_text().split()
    rollback = int(skip["rollback"]["iteration"])
    data = out / "data" / "burst" / "part-0.npy"
    spec = spec_for(out, a, "restart", data)
    pin = [f"--trainer.save_folder={out / 'restart' / 'save'}"]
    pin.append(f"--trainer.load_path={burst_save / f'step{rollback}'}")
    (out / "restart" / "overrides.txt").write_text(shlex.join([*words, *pin]) + "\n")
    return train(out, "restart", spec, [*words, *pin])


def pre_level(losses: dict[int, float], a: argparse.Namespace) -> float:
    """The loss level before the burst: the mean of the 10 steps before it."""
    return float(np.mean([losses[s] for s in range(a.burst[0] - 10, a.burst[0])]))


def peaks(losses: dict[int, float], a: argparse.Namespace, pre: float) -> dict[str, Any]:
    """The peaks from the burst on and after it (steps, ratios to the pre-burst level `pre`)."""
    out: dict[str, Any] = {"pre_burst_mean": round(pre, 4)}
    for name, first in (("from_burst", a.burst[0]), ("after_burst", a.burst[1] + 1)):
        span = {s: v for s, v in losses.items() if s >= first}
        if span:
            top = max(span, key=lambda s: span[s])
            out[f"peak_{name}"] = round(span[top], 4)
            out[f"peak_{name}_step"] = top
            out[f"peak_{name}_ratio"] = round(span[top] / pre, 3)
    out["final"] = round(losses[max(losses)], 4)
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--steps", type=int, default=360)
    parser.add_argument("--burst", type=int, nargs=2, default=[251, 270], metavar=("FIRST", "LAST"))
    parser.add_argument("--save-interval", type=int, default=50)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--port", type=int, default=29581)
    parser.add_argument("--no-control", action="store_true", help="Skip the control run.")
    return parser.parse_args()


def main() -> None:
    a = parse_args()
    if not OLMO_PY.exists():
        sys.exit(f"{OLMO_PY}: missing; build it with scripts/olmo_oracle_env.sh")
    a.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    data = write_data(a.out, a)
    burst_data = a.out / "data" / "burst" / "part-0.npy"
    wall: dict[str, float] = {}
    burst_spec = spec_for(a.out, a, "burst", burst_data)
    wall["burst"], watch_dir = train_watched(a.out, "burst", burst_spec)
    if not a.no_control:
        control_spec = spec_for(a.out, a, "control", a.out / "data" / "control" / "part-0.npy")
        wall["control"] = train(a.out, "control", control_spec, [])
    onset, event = spike_onset(a.out, a.out / "burst" / "train.log", tuple(a.burst))
    found = analyse(a.out, a.out / "burst" / "save", onset, event)
    wall["spike"] = found.pop("wall_s")
    wall["restart"] = restart(a.out, a, a.out / "burst" / "save", found["skip"])
    summary = summarise(a, data, event, found, watch_dir)
    summary["wall_s"] = {k: round(v, 1) for k, v in wall.items()}
    summary["wall_s"]["total"] = round(time.perf_counter() - start, 1)
    summary["load_average"] = os.getloadavg()
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps({k: summary[k] for k in summary if k not in ("watch_spikes",)}, default=str))


def summarise(
    a: argparse.Namespace,
    data: dict[str, Any],
    event: dict[str, Any],
    found: dict[str, Any],
    watch_dir: Path,
) -> dict[str, Any]:
    """What each step of the loop found: the watcher's and triage's spike, the blamed clusters
    and the model's loss z on them, the planned and the trainer's skipped steps, the peaks."""
    skip = found["skip"]
    said = skipped_steps((a.out / "restart" / "train.log").read_text().splitlines())
    planned = sorted(expand(skip["iterations"]))
    report = json.loads((a.out / "spike" / "report.json").read_text())
    culprits = skip.get("culprit_clusters") or []
    blamed = [c for c in report["clusters"] if c["id"] in culprits]
    loss_z = [c.get("loss_z") for c in blamed]
    burst_curve = curve(a.out / "burst" / "train.log")
    pre = pre_level(burst_curve, a)
    summary = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "instances": data["instances"],
        "burst_instances": data["burst_instances"],
        "burst_doc_ids": data["burst_doc_ids"],
        "watch_spikes": [e for e in watch_events(watch_dir) if "spike" in str(e.get("kind"))],
        "triage_spike": event,
        "blamed": {k: skip.get(k) for k in ("documents", "culprit_clusters", "rollback")},
        "culprits": [{k: c.get(k) for k in CULPRIT_KEYS} for c in blamed],
        "rescore_checkpoint": found["checkpoint"],
        "spike_command": skip.get("provenance", {}).get("command"),
        "culprit_loss_z": max((z for z in loss_z if z is not None), default=None),
        "model_agreement": (report.get("model") or {}).get("agreement"),
        "planned_skip": planned,
        "trainer_skipped": said,
        "skip_matches": said == planned == list(range(a.burst[0], a.burst[1] + 1)),
        "burst": peaks(burst_curve, a, pre),
        "restart": peaks(curve(a.out / "restart" / "train.log"), a, pre),
    }
    if not a.no_control:
        summary["control"] = peaks(curve(a.out / "control" / "train.log"), a, pre)
    return summary


if __name__ == "__main__":
    main()
