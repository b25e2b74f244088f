"""OLMo-core replay against the real library (ai2-olmo-core 3.0.0, iterated in its own venv).

Every sample of every iteration, for several runs (1, 2 and 4 DP ranks, torch DataLoader workers,
two epochs, chunked global indices, the run's saved global_indices file, an instance filter, a
restart from a data-loader state), must be the instance the library's NumpyFSLDataLoader yields
at that step and rank, and its document pieces must hold exactly the instance's tokens.

The library's behaviour these tests rely on (allenai/OLMo-core at
fa6c5014c9f6e9ee789da2d9c20d5126fee8df0d; src/olmo_core/data/data_loader.py is identical in the
ai2-olmo-core 3.0.0 wheel the oracle runs):
- data_loader.py:667-690 `_build_global_indices` (PCG64(seed + epoch), chunks);
  data_loader.py:656-665 the global_indices file name; data_loader.py:720-747 batches as rows,
  `batches_processed` offset, workers round-robin, DP rank columns r::W;
- data_loader.py:441-480 and 749-777 the state_dict / load_state_dict (seed, fingerprint,
  batches_processed = tokens_processed // global_batch_size);
- train/trainer.py `_fit_epoch`: reshuffle(epoch), `global_step += 1` per batch, reset() and
  epoch + 1 at the end of an epoch.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from dataloaders.run_config import load_config
from forensics.errors import ForensicsError
from forensics.replay import open_replayer
from forensics_testing.olmo_core_run import (
    config_dict,
    oracle_positions,
    oracle_spec,
    random_docs,
    run_oracle,
    write_config,
    write_documents,
)
from forensics_testing.repo_paths import REPO_ROOT

PATTERN = np.asarray([5, 6, 7])
SOURCES = {"web": ["web-0.npy", "web-1.npy"], "code": ["code-0.npy"]}
NEW_FILES = ["web-0.npy", "web-1.npy", "code-0.npy", "new-0.npy"]

# name -> (config keywords, extra oracle settings)
RUNS = {
    # one rank, two epochs, an instance filter (masks the repeated-pattern instances)
    "1rank-2epochs-filter": (
        dict(seq=32, ipb=8, seed=7, train_iters=50, instance_filter={"repetition_max_count": 8}),
        {},
    ),
    # four ranks, two DataLoader worker processes, chunked indices (max_target_sequence_length)
    "4ranks-workers-chunked": (
        dict(seq=16, ipb=16, seed=11, world=4, train_iters=40, max_target_sequence_length=64),
        {"num_workers": 2},
    ),
    # two ranks, the library's reader threads; our replay reads the run's saved global indices
    "2ranks-saved-indices": (
        dict(seq=32, ipb=6, seed=3, world=2, train_iters=60, work_dir="work-saved"),
        {"num_threads": 3},
    ),
    # restart from the data-loader state after 40 steps (in epoch 2), three workers
    "restart": (
        dict(seq=32, ipb=8, seed=21, world=2, train_iters=60, work_dir="work-restart"),
        {"restart": {"after": 40}, "num_workers": 3},
    ),
    # restart after 30 steps on changed data: a new source added (ignore_fingerprint_mismatch)
    "restart-new-data": (
        dict(seq=32, ipb=9, seed=13, world=3, train_iters=70, work_dir="work-new"),
        {"restart": {"after": 30, "paths": NEW_FILES}},
    ),
}


def _planted(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Arrays with a repeated pattern of random period, count and offset planted in noise (some
    with several, some with none): the edges of find_periodic_sequences' row alignment."""
    out = []
    for _ in range(n):
        length = int(rng.integers(20, 300))
        arr = rng.integers(0, 50, size=length)
        for _ in range(int(rng.integers(0, 3))):
            period = int(rng.integers(1, 16))
            times = int(rng.integers(2, 45))
            run = np.tile(rng.integers(0, 50, size=period), times)[: length - 1]
            at = int(rng.integers(0, length - len(run) + 1))
            arr[at : at + len(run)] = run
        out.append(arr)
    return out


_FILTER_RNG = np.random.default_rng(31)
FILTER_CASES = [
    ({"repetition_max_period": 13, "repetition_min_period": 1, "repetition_max_count": 32},
     _planted(_FILTER_RNG, 150)),
    ({"repetition_max_period": 7, "repetition_min_period": 2, "repetition_max_count": 5},
     _planted(_FILTER_RNG, 150)),
    ({"repetition_max_period": 15, "repetition_min_period": 3, "repetition_max_count": 3},
     _planted(_FILTER_RNG, 150)),
]  # fmt: skip


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three token files in two sources (plus one for the changed-data restart); web-0 has Dolma
    metadata; some documents repeat a 3-token pattern (what the instance filter masks)."""
    folder = tmp_path_factory.mktemp("olmo-run")
    rng = np.random.default_rng(5)
    for name, n, meta in (("web-0", 70, True), ("web-1", 60, False), ("code-0", 80, False)):
        docs = random_docs(rng, n)
        for k in range(2, n, 17):  # repeated n-grams, long enough to fill most of an instance
            docs[k] = np.tile(PATTERN, 30)
        rows = [[f"{name}-doc{i}", f"s3://crawl/{name}.jsonl", str(i)] for i in range(n)]
        write_documents(folder / f"{name}.npy", docs, metadata=rows if meta else None)
    write_documents(folder / "new-0.npy", random_docs(rng, 90))
    return folder


def _config(name: str) -> dict:
    """Our config for a run (with work_dir: read the global indices the library saved)."""
    kw, _ = RUNS[name]
    return config_dict(SOURCES, **kw)


@pytest.fixture(scope="module")
def oracle(run_dir: Path) -> dict[str, dict]:
    """What the real library yields for every run in RUNS (one oracle interpreter)."""
    jobs = []
    for name, (kw, extra) in RUNS.items():
        config = _config(name)
        spec = oracle_spec(config, run_dir, **extra)
        spec["work_dir"] = str(run_dir / kw.get("work_dir", f"work-{name}"))
        if "restart" in extra and "paths" in extra["restart"]:
            spec["restart"] = {**extra["restart"], "paths": [str(run_dir / p) for p in NEW_FILES]}
        jobs.append(spec)
    for params, arrays in FILTER_CASES:
        jobs.append({"instance_filter": params, "filter_arrays": [a.tolist() for a in arrays]})
    results = run_oracle(jobs, run_dir)
    return dict(
        zip([*RUNS, *(f"filter-{k}" for k in range(len(FILTER_CASES)))], results, strict=True)
    )


def _check_against_oracle(config_path: Path, out: dict, first: int, last: int) -> pl.DataFrame:
    replayer = open_replayer(load_config(config_path))
    table = replayer.replay(first, last, text=False, progress=False)
    want = oracle_positions(out)
    assert sorted(want) == list(range(first, last + 1)), "oracle ran the same steps"
    samples = table.unique(["iteration", "position"]).sort("iteration", "position")
    got: dict[int, list[int]] = {}
    for it, inst in samples.select("iteration", "dataset_sample").iter_rows():
        got.setdefault(it, []).append(inst)
    assert got == want
    # the document pieces of each sample are exactly the tokens the library fed
    tokens = {
        (s["step"], r * len(s["index"]) + j): ids
        for r, rank in enumerate(out["ranks"])
        for s in rank["steps"]
        for j, ids in enumerate(s["input_ids"])
    }
    pieces = replayer.segments(samples["dataset_sample"].to_numpy(), samples["stage"].to_numpy())
    rebuilt: dict[int, list[int]] = {}
    for row, f, d, a, b in zip(*(pieces[k].tolist() for k in pieces), strict=True):
        start, _ = replayer._doc_span(f, d)
        part = np.fromfile(replayer.files[f].path, dtype=np.uint16)[start + a : start + b]
        rebuilt.setdefault(row, []).extend(part.tolist())
    keys = list(samples.select("iteration", "position").iter_rows())
    for row, key in enumerate(keys):
        assert rebuilt[row] == tokens[key], f"tokens of sample {key}"
    stage = int(samples["stage"].max())
    assert replayer.fingerprint()["olmo_core_fingerprints"][stage] == out["fingerprint"]
    return table


@pytest.mark.parametrize(
    "name", ["1rank-2epochs-filter", "4ranks-workers-chunked", "2ranks-saved-indices"]
)
def test_every_sample_matches_the_library(run_dir, oracle, name):
    kw, _ = RUNS[name]
    out = oracle[name]
    config_path = write_config(run_dir, _config(name), f"{name}.yaml")
    n_iters = kw["train_iters"]
    per_epoch = out["ranks"][0]["batches_per_epoch"]
    assert per_epoch < n_iters, "precondition: the run crosses an epoch boundary"
    table = _check_against_oracle(config_path, out, 1, n_iters)
    replayer = open_replayer(load_config(config_path))
    assert replayer.batches_per_epoch == per_epoch
    if "instance_filter" in kw:
        want_masked = {
            (s["step"], j): not m
            for s in out["ranks"][0]["steps"]
            for j, m in enumerate(s["instance_mask"])
        }
        got = table.unique(["iteration", "position"]).select(
            "iteration", "position", "instance_masked"
        )
        got_masked = {(i, p): m for i, p, m in got.iter_rows()}
        assert got_masked == want_masked
        assert 0 < sum(want_masked.values()) < len(want_masked), "the filter masked some"
    if "work_dir" in kw:  # the file we read is the one the library wrote
        saved = sorted(p.name for p in (run_dir / kw["work_dir"]).glob("global_indices_*.npy"))
        from dataloaders.olmo_core.order import global_indices_name

        assert saved == [
            global_indices_name(seed=kw["seed"], epoch=e, dataset_size=replayer.size, chunk=1)
            for e in (1, 2)
        ]


def test_restart_from_the_data_loader_state(run_dir, oracle, tmp_path):
    """A run restarted from its checkpointed data-loader state (mid epoch 2) continues exactly
    where our replay says; the state is checked against the config."""
    out = oracle["restart"]
    states = [r["state"] for r in out["ranks"]]
    per_epoch = out["ranks"][0]["batches_per_epoch"]
    assert states[0]["epoch"] == 2 and states[0]["batches_processed"] == 40 - per_epoch
    state_file = run_dir / "restart-state.json"
    state_file.write_text(json.dumps(states[0]))
    config = _config("restart")
    config["data"]["resumes"] = [{"iteration": 41, "state": state_file.name}]
    path = write_config(run_dir, config, "restart.yaml")
    _check_against_oracle(path, out["resumed"], 41, 60)

    def refuse(state: dict, iteration: int = 41) -> str:
        state_file.write_text(json.dumps(state))
        config["data"]["resumes"] = [{"iteration": iteration, "state": state_file.name}]
        with pytest.raises(ForensicsError) as err:
            open_replayer(load_config(write_config(run_dir, config, "bad.yaml")))
        assert "\n" not in str(err.value)
        return str(err.value)

    assert "seed 99" in refuse({**states[0], "seed": 99})
    assert "dataset_fingerprint" in refuse({**states[0], "dataset_fingerprint": "0" * 64})
    assert "resumes after 40 steps" in refuse(states[0], iteration=30)


def test_restart_on_changed_data(run_dir, oracle):
    """A restart on other token files (a new source added; OLMo-core's
    ignore_fingerprint_mismatch) keeps the state's epoch and batches processed over the new
    dataset's order: data stage 1 from the resume on, exactly as the library iterates it."""
    out = oracle["restart-new-data"]
    state_file = run_dir / "new-data-state.json"
    state_file.write_text(json.dumps(out["ranks"][0]["state"]))
    config = _config("restart-new-data")
    new_sources = [*config["data"]["sources"], {"name": "new", "paths": ["new-0.npy"]}]
    config["data"]["resumes"] = [
        {"iteration": 31, "state": state_file.name, "sources": new_sources}
    ]
    path = write_config(run_dir, config, "changed.yaml")
    table = _check_against_oracle(path, out["resumed"], 31, 70)
    assert set(table["stage"].unique()) == {1}
    assert "new" in set(table["dataset"].unique())
    replayer = open_replayer(load_config(path))
    assert replayer.stage_of(np.asarray([30, 31])).tolist() == [0, 1]
    assert replayer.stages[1].batches_per_epoch != replayer.stages[0].batches_per_epoch
    assert load_config(path).data.stage_start_iterations == [1, 31]
    # and the stage-0 part of the same config is still the uninterrupted run
    assert replayer.replay(1, 30, progress=False)["stage"].unique().to_list() == [0]


def _copy_run(run_dir: Path, tmp_path: Path, **kw) -> tuple[Path, dict]:
    for name in ("web-0.npy", "web-0.csv.gz", "web-1.npy", "code-0.npy"):
        shutil.copy(run_dir / name, tmp_path / name)
    config = config_dict(SOURCES, **kw)
    return write_config(tmp_path, config), config


def test_bad_token_files_are_one_line_errors(run_dir, tmp_path):
    config_path, _ = _copy_run(run_dir, tmp_path, seq=32, ipb=8, seed=1, train_iters=10)
    (tmp_path / "web-1.npy").unlink()
    with pytest.raises(ForensicsError, match="web-1.npy: token file not found"):
        open_replayer(load_config(config_path))
    (tmp_path / "web-1.npy").write_bytes(b"\x00")  # half a uint16 token
    with pytest.raises(ForensicsError, match="not a whole number of uint16 tokens"):
        open_replayer(load_config(config_path))
    for name in ("web-0.npy", "web-1.npy", "code-0.npy"):
        (tmp_path / name).write_bytes(np.zeros(40, np.uint16).tobytes())  # one instance each
    with pytest.raises(ForensicsError, match="fewer than one global batch"):
        open_replayer(load_config(config_path))


def test_metadata_provenance_and_documents(run_dir, tmp_path):
    """Dolma metadata rows become facets; a segment's document is the generated one."""
    config_path, _ = _copy_run(run_dir, tmp_path, seq=32, ipb=8, seed=2, train_iters=20)
    replayer = open_replayer(load_config(config_path))
    table = replayer.replay(1, 20, progress=False)
    assert replayer.facets == ["file", "id", "src", "loc"]
    web0 = table.filter(pl.col("file").str.ends_with("web-0.npy"))
    assert web0.height and (web0["id"] == "web-0-doc" + web0["loc"]).all()
    assert table.filter(pl.col("file").str.ends_with("code-0.npy"))["id"].is_null().all()
    tokens = np.fromfile(tmp_path / "web-0.npy", dtype=np.uint16)
    ends = np.flatnonzero(tokens == 0) + 1
    for row in web0.head(20).iter_rows(named=True):
        k = row["doc_id"]  # file 0 of its source: doc_id is the document number
        start = ends[k - 1] if k else 0
        assert int(row["loc"]) == k and row["token_end"] <= ends[k] - start


def test_cache_is_reused_and_a_bad_entry_is_rebuilt(run_dir, tmp_path, _private_forensics_cache):
    config_path, _ = _copy_run(run_dir, tmp_path, seq=32, ipb=8, seed=4, train_iters=30)
    first = open_replayer(load_config(config_path)).replay(1, 30, progress=False)
    root = _private_forensics_cache / "olmo-core"
    entries = sorted(p.name for p in root.iterdir())
    assert any(n.startswith("global_indices_") for n in entries)
    assert sum(n.startswith("doc_ends-") for n in entries) == 3
    for entry in root.iterdir():  # truncated entries: ignored, rebuilt, same answer
        entry.write_bytes(entry.read_bytes()[:16])
    again = open_replayer(load_config(config_path)).replay(1, 30, progress=False)
    assert again.equals(first)


def test_example_config_validates():
    config = load_config(REPO_ROOT / "configs" / "example-olmo-core.yaml")
    assert config.data.format == "olmo-core"
    assert config.training.global_batch_size == config.data.instances_per_batch
    assert config.data.stage_start_iterations == [1]


@pytest.mark.parametrize("case", range(len(FILTER_CASES)))
def test_instance_filter_matches_the_library(oracle, case):
    """Our vectorised repeated n-gram filter against OLMo-core's `_validate_instance` on arrays
    of every length with planted repeats (numpy_dataset.py `_validate_instance`, utils.py
    `find_periodic_sequences`)."""
    from dataloaders.olmo_core.repetition import masked_instances

    params, arrays = FILTER_CASES[case]
    want = [not v for v in oracle[f"filter-{case}"]["valid"]]
    got = [
        bool(
            masked_instances(
                a[None, :],
                max_period=params["repetition_max_period"],
                min_period=params["repetition_min_period"],
                max_count=params["repetition_max_count"],
            )[0]
        )
        for a in arrays
    ]
    assert got == want
    assert 0 < sum(want) < len(want), "the cases hit both outcomes"


def test_replay_command_runs_without_torch(run_dir, tmp_path):
    """`forensics replay` on an olmo-core config writes the window and never imports torch
    (checked in a fresh interpreter)."""
    import subprocess
    import sys

    config_path, config = _copy_run(run_dir, tmp_path, seq=32, ipb=8, seed=6, train_iters=30)
    config["data"]["instance_filter"] = {"repetition_max_count": 8}
    config_path = write_config(tmp_path, config)
    out = tmp_path / "w.parquet"
    code = (
        "import sys; from forensics.cli import app; from typer.testing import CliRunner;"
        f"r = CliRunner().invoke(app, ['replay', '--config', {str(config_path)!r}, '--step', "
        f"'30', '--window', '10', '--no-progress', '--out', {str(out)!r}]);"
        "assert r.exit_code == 0, r.output;"
        "print('torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "False", proc.stdout + proc.stderr
    table = pl.read_parquet(out)
    want = open_replayer(load_config(config_path)).replay(21, 30, progress=False)
    assert table.equals(want)
    assert table["instance_masked"].dtype == pl.Boolean


def test_exposure_counts_what_the_replay_table_holds(run_dir, oracle):
    """Replayer.exposure (vectorised over whole epochs) against the replay table (checked against
    the library above), across the epoch boundary and the changed-data restart."""
    out = oracle["restart-new-data"]
    state_file = run_dir / "exposure-state.json"
    state_file.write_text(json.dumps(out["ranks"][0]["state"]))
    config = _config("restart-new-data")
    sources = [*config["data"]["sources"], {"name": "new", "paths": ["new-0.npy"]}]
    config["data"]["resumes"] = [{"iteration": 31, "state": state_file.name, "sources": sources}]
    replayer = open_replayer(load_config(write_config(run_dir, config, "exposure.yaml")))
    table = replayer.replay(1, 70, progress=False)
    docs = table.select("dataset", "doc_id").unique().sort("dataset", "doc_id")
    flagged = docs.gather_every(7)
    hits = table.join(flagged, on=["dataset", "doc_id"], how="semi")
    want = hits.unique(["iteration", "position"]).group_by("iteration").len()
    got = replayer.exposure(flagged, 1, 70)
    merged = got.join(want, on="iteration", how="left").with_columns(pl.col("len").fill_null(0))
    assert (merged["flagged_samples"] == merged["len"]).all()
    assert merged["len"].sum() > 0 and (got["samples"] == 9).all()


def test_applied_steps_to_skip_mark_rows_but_keep_the_order(run_dir, tmp_path):
    """An earlier restart with steps_to_skip drew those batches without training on them
    (OLMo-core's trainer fetches the batch before testing the range): same order, rows marked."""
    config_path, config = _copy_run(run_dir, tmp_path, seq=32, ipb=8, seed=8, train_iters=30)
    plain = open_replayer(load_config(config_path)).replay(1, 30, progress=False)
    config["training"]["applied_skips"] = [
        {
            "trainer": "olmo-core",
            "resume_from": 10,
            "flag": "steps_to_skip=[StepSkipRange(start=12, stop=14)]",
        }
    ]
    skipped = open_replayer(load_config(write_config(tmp_path, config, "skips.yaml")))
    table = skipped.replay(1, 30, progress=False)
    assert table.drop("skipped").equals(plain.drop("skipped"))
    assert sorted(table.filter("skipped")["iteration"].unique()) == [12, 13]
    assert load_config(config_path).training.trainer == "olmo-core"
    config["training"]["trainer"] = "megatron-lm"
    with pytest.raises(ForensicsError, match="training.trainer 'megatron-lm'"):
        open_replayer(load_config(write_config(tmp_path, config, "wrong.yaml")))


def test_a_saved_global_indices_file_of_another_size_is_refused(run_dir, tmp_path):
    from dataloaders.olmo_core.order import global_indices_name

    config_path, config = _copy_run(run_dir, tmp_path, seq=32, ipb=8, seed=9, train_iters=10)
    size = open_replayer(load_config(config_path)).size
    config["data"]["work_dir"] = "work"
    (tmp_path / "work").mkdir()
    name = global_indices_name(seed=9, epoch=1, dataset_size=size, chunk=1)
    np.arange(size - 1, dtype=np.uint32).tofile(tmp_path / "work" / name)  # one index short
    replayer = open_replayer(load_config(write_config(tmp_path, config, "saved.yaml")))
    with pytest.raises(ForensicsError, match=f"{name}: .* expected {size * 4}"):
        replayer.replay(1, 10, progress=False)


@pytest.mark.parametrize("fields", [["id", "text"], ["dataset"], ["id", "id"], ["file"]])
def test_metadata_fields_cannot_replace_replay_columns(tmp_path, fields):
    config = config_dict(SOURCES, seq=32, ipb=8, seed=1, train_iters=10, metadata_fields=fields)
    with pytest.raises(ForensicsError, match="metadata_fields"):
        load_config(write_config(tmp_path, config))
