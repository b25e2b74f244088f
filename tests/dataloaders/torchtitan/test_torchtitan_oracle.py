"""Replay of torchtitan runs equals torchtitan 0.3.0's own loaders, batch for batch.

The oracle is the real package (PyPI torchtitan 0.3.0 in .venv-titan, built by
scripts/torchtitan_oracle_env.sh; its files are those of pytorch/torchtitan commit
1fdf90d3f9b756ef709ce262bc839f1dab679b5e, whose line numbers are cited):
tests/oracles/torchtitan_loader.py registers each tiny local dataset in its dataset table
(torchtitan/hf_datasets/text_datasets.py:38-54), builds its `HuggingFaceTextDataLoader`
(:238-289) or `InterleavedHuggingFaceTextDataLoader` (:300-372) per DP rank with its
`HuggingFaceTokenizer`, and writes every batch's inputs and labels. Saves and resumes go through
its `CheckpointManager` (components/checkpointer/dcp.py:68) in a gloo group of DP ranks, so the
step-N folder our replay reads is the one torchtitan wrote. All jobs run in one oracle
interpreter (the module fixture). Our side rebuilds each sample from the replay table's segments
(the documents' ids[token_start:token_end]) and must match exactly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dataloaders.torchtitan import saved_loader_state
from forensics_testing.torchtitan_run import (
    load,
    oracle_batches,
    replayed_batches,
    run_config,
    run_oracle,
    write_jsonl,
    write_tokenizer,
)


def _src(name: str, files: list[str], streaming: bool, weight: float = 1.0) -> dict[str, Any]:
    return {"name": name, "format": "json", "files": files, "streaming": streaming,
            "weight": weight}  # fmt: skip


@pytest.fixture(scope="module")
def titan(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case's job and torchtitan's batches (one oracle run for the module)."""
    root = tmp_path_factory.mktemp("titan")
    tok = str(write_tokenizer(root / "tok"))
    tok_bos = str(write_tokenizer(root / "tok-bos", bos_by_tokenizer=True))
    a = write_jsonl(root / "a", "a", 2, 9, seed=1)  # 2 files: a stream splits them by file
    b = write_jsonl(root / "b", "b", 3, 5, seed=2)  # 3 files: by example for 2 ranks
    c = write_jsonl(root / "c", "c", 1, 6, seed=3)
    base = {"tokenizer": tok, "seq_len": 8, "batch_size": 2}
    jobs = {
        # map-style, 2 ranks, 2 batches a step, about 3 epochs: re-shuffled with seeds 43, 44
        "map": {**base, "sources": [_src("a", a, False)], "dp_world_size": 2,
                "accumulation": 2, "batches": 14},
        # streaming by example (3 files, 2 ranks), re-looped; the tokenizer adds BOS itself
        "stream": {**base, "tokenizer": tok_bos, "sources": [_src("b", b, True)],
                   "dp_world_size": 2, "batches": 9},
        # a mix of a map-style and a streaming source, 2 ranks
        "mix": {**base, "sources": [_src("a", a, False, 0.7), _src("b", b, True, 0.3)],
                "interleaved": True, "dp_world_size": 2, "batches": 12},
        # finite runs: the run ends when the data does (the short last batch kept)
        "finite": {**base, "sources": [_src("a", a, False)], "dp_world_size": 2,
                   "infinite": False, "batches": 40},
        "first_exhausted": {**base, "sources": [_src("a", a, False, 0.5), _src("c", c, False)],
                            "interleaved": True, "infinite": False, "dp_world_size": 1,
                            "batches": 40},
        "all_exhausted": {**base, "sources": [_src("a", a, False, 0.5), _src("c", c, True)],
                          "interleaved": True, "infinite": False,
                          "stopping_strategy": "all_exhausted", "dp_world_size": 1,
                          "batches": 40},
        # saved by torchtitan's CheckpointManager after 3 steps (2 ranks), then resumed
        "resume_map": {**base, "sources": [_src("a", a, False)], "dp_world_size": 2,
                       "accumulation": 2, "save": {"after": 3, "folder": str(root / "ck1")},
                       "resume": {"step": 3, "batches": 8}},
        "resume_mix": {**base, "sources": [_src("a", a, True, 0.6), _src("b", b, False)],
                       "interleaved": True, "dp_world_size": 2, "seed": 7,
                       "save": {"after": 5, "folder": str(root / "ck2")},
                       "resume": {"step": 5, "batches": 7}},
    }  # fmt: skip
    results = run_oracle(list(jobs.values()), root)
    return {"root": root, "jobs": jobs, "results": dict(zip(jobs, results, strict=True))}


def _replayer(titan: dict[str, Any], case: str, steps: int, **data: Any) -> Any:
    job = titan["jobs"][case]
    return load(run_config(job, titan["root"], steps, **data))


@pytest.mark.parametrize("case", ["map", "stream", "mix"])
def test_replay_equals_torchtitan(titan: dict[str, Any], case: str) -> None:
    """Map-style and streaming sources and the interleaved mix, on DP ranks 0 and 1, across
    re-loops: every batch's inputs and labels are torchtitan's."""
    job = titan["jobs"][case]
    want = oracle_batches(titan["results"][case]["ranks"])
    steps = job["batches"] // job.get("accumulation", 1)
    replayer = _replayer(titan, case, steps)
    assert replayer.last_iteration == steps
    got = replayed_batches(replayer, job, 1, steps)
    assert got == want


@pytest.mark.parametrize("case", ["finite", "first_exhausted", "all_exhausted"])
def test_finite_runs_end_with_the_data(titan: dict[str, Any], case: str) -> None:
    """infinite: false ends where torchtitan's loader ends (a single source's last epoch, the
    first exhausted source, or every source exhausted once), with the short last batch; the run
    ends at the first rank whose loader runs out (trainer.py:677-683, 1040-1042)."""
    job = titan["jobs"][case]
    want = oracle_batches(titan["results"][case]["ranks"])
    steps = min(len(r) for r in want)
    assert 0 < steps < job["batches"]  # the data ran out
    replayer = _replayer(titan, case, job["batches"])
    assert replayer.last_iteration == steps
    assert replayed_batches(replayer, job, 1, steps) == [r[:steps] for r in want]


@pytest.mark.parametrize("case", ["resume_map", "resume_mix"])
def test_resume_from_torchtitans_checkpoint(titan: dict[str, Any], case: str) -> None:
    """The loader state torchtitan's CheckpointManager saved in step-N (DCP, read through the
    safe pickle loader) gives the batches torchtitan's resumed loaders yield."""
    job = titan["jobs"][case]
    result = titan["results"][case]
    accum = job.get("accumulation", 1)
    after = job["save"]["after"]
    before = oracle_batches(result["ranks"])
    resumed = oracle_batches(result["resumed"])
    steps = after + job["resume"]["batches"] // accum
    folder = Path(job["save"]["folder"]) / "checkpoint" / f"step-{after}"
    replayer = _replayer(
        titan, case, steps, resumes=[{"iteration": after, "checkpoint": str(folder)}]
    )
    assert replayed_batches(replayer, job, 1, after) == before
    assert replayed_batches(replayer, job, after + 1, steps) == resumed


def test_saved_state_read_from_the_save_folder(titan: dict[str, Any]) -> None:
    """The save-folder hook: the dump folder, the checkpoint folder and the step folder all
    name the same state; each DP rank's state says where its loader stood."""
    job = titan["jobs"]["resume_mix"]
    dump = Path(job["save"]["folder"])
    step, states = saved_loader_state(dump)
    assert step == 5 and len(states) == 2
    assert saved_loader_state(dump / "checkpoint", 5)[1] == states
    assert saved_loader_state(dump / "checkpoint" / "step-5")[1] == states
    for state in states:
        assert state.rng_state is not None and len(state.sources) == 2
        assert state.sources[0].data is not None  # the streaming source's own state
        assert state.sources[1].sample_idx is not None  # the map-style one's counters
        assert state.batches_yielded == 5
