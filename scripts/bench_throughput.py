"""Scoring and decoding throughput per CPU-second: this tree beside a reference revision, in one
run, and the check that both give the same scores and the same texts.

    .venv/bin/python scripts/bench_throughput.py [--reference main] [--repeat 2]
                                                 [--work /tmp/forensics-bench-throughput]
                                                 [--no-eval] [--tokens 1e7]

Corpora (built once into --work, then read back, so both trees see the same bytes):
- `repo`: every *.py and *.md file of this repository, one document each (fixed by the commit);
- `eval`: the two labelled sets of bench_score.py (scripts/eval_corpus.py, tuned, and
  scripts/eval_corpus_man.py, held-out), built from text on this machine (--no-eval: skip);
- decoding: a generated Megatron run (forensics_testing/scan_run.py: real text, a byte-level BPE
  trained here, --tokens tokens); every document of its clean dataset decoded with the
  replayer's `documents()`, the spike's decode stage.

The reference tree is `git archive` of --reference (forensics, dataloaders, forensics_testing),
unpacked under --work and put first on PYTHONPATH. Every measurement runs in a fresh process:
imports, numba compilation and table building happen in a warm-up on a small slice and are not
counted; CPU is `time.process_time()` (every thread of the process), so the figure holds on a
loaded machine. Reference and ours alternate --repeat times; the least CPU of each is shown,
with the load average. Identity: every output column of `score_table(..., keys=True)` (scores,
reasons, rule keys) and every decoded text, reference against ours; the script exits non-zero
when any differs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from dataloaders.run_config import load_config
from forensics.replay import open_replayer
from forensics.score import score_table
from forensics_testing.scan_run import ScanRunSpec, build_scan_run

ROOT = Path(__file__).resolve().parents[1]
TREES = ("forensics", "dataloaders", "forensics_testing")
SCORE_COLUMNS = (
    "garbage_score", "spam_score", "garbage_reason", "spam_reason", "garbage_rule", "spam_rule"
)  # fmt: skip


def _score_worker(corpus: Path, out: Path) -> dict:
    import polars as pl

    docs = pl.read_parquet(corpus).select("text")
    score_table(docs.head(300), "text", keys=True)  # imports, numba, regexes, char tables
    t0, c0 = time.perf_counter(), time.process_time()
    scored = score_table(docs, "text", keys=True)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    scored.select(SCORE_COLUMNS).write_parquet(out)
    mb = docs["text"].str.len_bytes().sum() / 1e6
    return {"cpu": cpu, "wall": wall, "docs": docs.height, "mb": mb}


def _decode_worker(run: Path, out: Path) -> dict:
    import polars as pl

    rep = open_replayer(load_config(run / "forensics.yaml"))
    ds = rep.datasets[rep.specs["clean"].prefix]
    n = ds.num_documents
    docs = pl.DataFrame({"dataset": ["clean"] * n, "doc_id": list(range(n))})
    rep.documents(docs.head(200), progress=False)  # tokenizer, tables, numba
    t0, c0 = time.perf_counter(), time.process_time()
    texts = rep.documents(docs, progress=False)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    texts.select("doc_id", "text").write_parquet(out)
    tokens = int(ds.document_token_counts().sum())
    mb = texts["text"].str.len_bytes().sum() / 1e6
    return {"cpu": cpu, "wall": wall, "docs": n, "mb": mb, "tokens": tokens}


def _repo_corpus(path: Path) -> None:
    import polars as pl

    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "*.py", "*.md"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    texts = [(ROOT / p).read_text(encoding="utf-8", errors="replace") for p in sorted(listed)]
    pl.DataFrame({"text": texts}).write_parquet(path)


def _eval_corpus(path: Path) -> None:
    import polars as pl

    sys.path.insert(0, str(ROOT / "scripts"))
    import eval_corpus
    import eval_corpus_man

    tuned = eval_corpus.build(seed=0, per_kind=80, english_limit=900, code_limit=400)
    held = eval_corpus_man.build(seed=0, per_kind=80)
    pl.concat([tuned.select("text"), held.select("text")]).write_parquet(path)


def _decode_run(run: Path, tokens: float) -> None:
    spec = ScanRunSpec(clean_docs=3000, dirty_docs=100, vocab_size=16000, tokens_target=int(tokens))
    build_scan_run(run, spec)


def _reference_tree(rev: str, work: Path) -> Path:
    """The reference revision's packages, unpacked once per commit (its numba cache kept)."""
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", rev], capture_output=True, text=True, check=True
    ).stdout.strip()
    tree = work / f"ref-{commit[:12]}"
    if not (tree / ".done").is_file():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit, *TREES],
            capture_output=True,
            check=True,
        ).stdout
        tar_path = work / "ref.tar"
        tar_path.write_bytes(archive)
        with tarfile.open(tar_path) as tar:
            tar.extractall(tree, filter="data")
        tar_path.unlink()
        (tree / ".done").write_text(commit)
    return tree


def _measure(kind: str, tree: Path, source: Path, out: Path) -> dict:
    """One measurement in a fresh process with `tree` first on the import path."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, __file__, "--worker", kind, "--source", str(source), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tree)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} worker on {tree} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _same(kind: str, ref: Path, ours: Path) -> str:
    """'identical', or what differs."""
    import polars as pl

    a, b = pl.read_parquet(ref), pl.read_parquet(ours)
    if a.columns != b.columns or a.height != b.height:
        return f"different shape: {a.shape} vs {b.shape}"
    bad = [c for c in a.columns if not a[c].equals(b[c])]
    if not bad:
        return "identical"
    rows = sum(int((a[c] != b[c]).fill_null(True).sum()) for c in bad)
    return f"DIFFERENT in {', '.join(bad)} ({rows} cells)"


def _row(name: str, kind: str, runs: dict[str, list[dict]]) -> list[str]:
    best = {who: min(r, key=lambda m: m["cpu"]) for who, r in runs.items()}
    out = []
    for who in ("reference", "ours"):
        m = best[who]
        rate = f"{m['docs'] / m['cpu']:,.0f} docs, {m['mb'] / m['cpu']:.2f} MB"
        if "tokens" in m:
            rate += f", {m['tokens'] / m['cpu'] / 1e6:.2f}M tokens"
        cpus = " ".join(f"{r['cpu']:.2f}" for r in runs[who])
        out.append(f"  {who:9s} per CPU-s: {rate} (CPU s {cpus}; wall {m['wall']:.1f} s)")
    speedup = best["reference"]["cpu"] / best["ours"]["cpu"]
    head = f"{kind} {name}: {best['ours']['docs']:,} documents, {best['ours']['mb']:.1f} MB"
    return [head, *out, f"  speed-up per CPU-second: {speedup:.2f}x"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reference", default="main")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path("/tmp/forensics-bench-throughput"))
    ap.add_argument("--no-eval", action="store_true", help="score the repository corpus only")
    ap.add_argument("--tokens", type=float, default=1e7, help="decoding run size (0: skip)")
    ap.add_argument("--worker", choices=("score", "decode"), help=argparse.SUPPRESS)
    ap.add_argument("--source", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        fn = _score_worker if args.worker == "score" else _decode_worker
        print(json.dumps(fn(args.source, args.out)))
        return
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    jobs: list[tuple[str, str, Path]] = []
    repo = work / "repo.parquet"
    _repo_corpus(repo)
    jobs.append(("score", "repo", repo))
    if not args.no_eval:
        evalset = work / "eval.parquet"
        if not evalset.is_file():
            _eval_corpus(evalset)
        jobs.append(("score", "eval", evalset))
    if args.tokens:
        run = work / f"decode-run-{int(args.tokens)}"
        if not (run / "truth.json").is_file():
            _decode_run(run, args.tokens)
        jobs.append(("decode", "byte-level BPE run", run))
    trees = {"reference": _reference_tree(args.reference, work), "ours": ROOT}
    lines, failed = [], False
    for kind, name, source in jobs:
        runs: dict[str, list[dict]] = {"reference": [], "ours": []}
        outs = {who: work / f"out-{kind}-{name.split()[0]}-{who}.parquet" for who in trees}
        for _ in range(args.repeat):
            for who, tree in trees.items():
                runs[who].append(_measure(kind, tree, source, outs[who]))
        same = _same(kind, outs["reference"], outs["ours"])
        failed |= same != "identical"
        lines += _row(name, kind, runs) + [f"  outputs, reference vs ours: {same}"]
        print("\n".join(lines[-5:]), flush=True)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"reference {args.reference}; {os.cpu_count()} cores, load average {load}")
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
