"""Helpers for the torchtitan family's tests: tiny local datasets and a tokenizer folder built
here (no hub), the run config, torchtitan 0.3.0's own loader run in .venv-titan
(scripts/torchtitan_oracle_env.sh, tests/oracles/torchtitan_loader.py), and the batches our
replay says, rebuilt from its segments, in the oracle's shape."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dataloaders.families import family_of
from dataloaders.run_config import load_config

ROOT = Path(__file__).resolve().parents[1]
ORACLE_PY = ROOT / ".venv-titan" / "bin" / "python"
ORACLE_SCRIPT = ROOT / "tests" / "oracles" / "torchtitan_loader.py"
WORDS = [f"w{i}" for i in range(60)]


def oracle_python() -> Path:
    """The interpreter that has torchtitan 0.3.0 (built once; skips when it cannot be)."""
    if not ORACLE_PY.exists():
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "torchtitan_oracle_env.sh")],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0 or not ORACLE_PY.exists():
            pytest.skip(f"cannot build the torchtitan oracle env: {proc.stderr[-300:]}")
    return ORACLE_PY


def write_tokenizer(folder: Path, *, bos_by_tokenizer: bool = False) -> Path:
    """An hf_assets_path folder: a word-level tokenizer.json and a tokenizer_config.json naming
    <bos> and <eos>. With `bos_by_tokenizer` its post-processor adds <bos> itself (torchtitan
    then does not insert it, components/tokenizer.py:404-409, 439-441)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {"<unk>": 0, "<bos>": 1, "<eos>": 2, **{w: i + 3 for i, w in enumerate(WORDS)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if bos_by_tokenizer:
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", special_tokens=[("<bos>", 1)]
        )
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"bos_token": "<bos>", "eos_token": "<eos>"}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def write_jsonl(folder: Path, name: str, n_files: int, per_file: int, seed: int) -> list[str]:
    """n_files JSON-lines files of per_file documents of 0-14 random words (an empty text too)."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(n_files):
        path = folder / f"{name}-{f}.jsonl"
        with open(path, "w") as handle:
            for i in range(per_file):
                words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 14)))
                handle.write(json.dumps({"text": words, "id": f"{name}-{f}-{i}"}) + "\n")
        paths.append(str(path))
    return paths


def run_oracle(jobs: list[dict[str, Any]], folder: Path) -> list[dict[str, Any]]:
    """Every job through torchtitan's own loaders, in one interpreter."""
    spec, out = folder / "titan-jobs.json", folder / "titan-out.json"
    spec.write_text(json.dumps({"jobs": jobs}))
    proc = subprocess.run(
        [str(oracle_python()), str(ORACLE_SCRIPT), str(spec), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())["results"]


def run_config(job: dict[str, Any], folder: Path, steps: int, **data: Any) -> Path:
    """The forensics run config of an oracle job (written to folder/<name>.yaml)."""
    sources = [
        {
            "name": s["name"],
            "files": s["files"],
            "streaming": s["streaming"],
            "weight": s.get("weight", 1.0),
        }
        for s in job["sources"]
    ]
    section = {
        "format": "torchtitan",
        "sources": sources,
        "interleaved": bool(job.get("interleaved")),
        "seed": job.get("seed", 42),
        "stopping_strategy": job.get("stopping_strategy", "on_first_exhausted"),
        "infinite": job.get("infinite", True),
        "seq_len": job["seq_len"],
        "local_batch_size": job["batch_size"],
        "dp_world_size": job["dp_world_size"],
        **data,
    }
    gbs = job["batch_size"] * job["dp_world_size"] * job.get("accumulation", 1)
    raw = {
        "data": section,
        "training": {"global_batch_size": gbs, "train_iters": steps},
        "tokenizer": job["tokenizer"],
    }
    path = folder / f"{job['sources'][0]['name']}-{len(list(folder.glob('*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def replayed_batches(replayer: Any, job: dict[str, Any], first: int, last: int) -> list[Any]:
    """Our replay of iterations first..last in the oracle's shape: per rank, its batches in
    order, each [inputs, labels] per sample, rebuilt from the documents' encoded ids."""
    import polars as pl

    table = replayer.replay(first, last)
    tokens: dict[tuple[str, int], list[int]] = {}
    for name in table["dataset"].unique().to_list():
        ids = table.filter(pl.col("dataset") == name)["doc_id"].to_numpy()
        for doc, enc in replayer.by_name[name].doc_tokens(ids, replayer.titan_tokenizer).items():
            tokens[(name, doc)] = enc
    samples: dict[tuple[int, int], list[list[int]]] = {}
    cols = ("iteration", "position", "dataset", "doc_id", "token_start", "token_end")
    for it, pos, name, doc, lo, hi in table.select(cols).iter_rows():
        inputs, labels = samples.setdefault((it, pos), [[], []])
        inputs.extend(tokens[(name, doc)][lo:hi])
        labels.extend(tokens[(name, doc)][lo + 1 : hi + 1])
    size, accum = job["batch_size"], job.get("accumulation", 1)
    per_rank = size * accum
    ranks: list[list[Any]] = [[] for _ in range(job["dp_world_size"])]
    for (it, pos), sample in sorted(samples.items()):
        rank, j = divmod(pos, per_rank)
        batch = (it - first) * accum + j // size
        while len(ranks[rank]) <= batch:
            ranks[rank].append([[], []])
        ranks[rank][batch][0].append(sample[0])
        ranks[rank][batch][1].append(sample[1])
    return ranks


def oracle_batches(result: list[Any]) -> list[Any]:
    """The oracle's batches per rank as [inputs per sample, labels per sample]."""
    return [[[inputs, labels] for inputs, labels in rank] for rank in result]


def load(path: Path) -> Any:
    """The replayer of the run config at `path`."""
    config = load_config(path)
    return family_of(config).open(config)
