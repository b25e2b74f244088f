"""Rescoring the window with a checkpoint, on a generated Megatron run.

The run is real data in real formats (forensics_testing.demo.build: a crawl batch of mojibake
and template spam enters at a mixture switch); the models are real transformers GPT-2s built
here: one randomly initialised, one trained for a few hundred iterations on the run's own
pre-switch batches (the order our replay gives). What is checked against what:
- the exported token sequences against megatron-core 0.16.1's own samples (GPTDataset.__getitem__
  returns tokens = text[:-1], labels = text[1:]: megatron/core/datasets/gpt_dataset.py:241-243 in
  the installed wheel), for every sample of a three-way blend;
- the per-sample loss against transformers' own loss (GPT2LMHeadModel(labels=...)), and the
  per-segment losses against the sample's (they must add up);
- the z-scores against what the injected data must do to a trained model and not to a random one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from dataloaders.run_config import load_config  # noqa: E402
from forensics.errors import ForensicsError  # noqa: E402
from forensics.replay import open_replayer  # noqa: E402
from forensics.rescore import RescoreOptions, rescore  # noqa: E402
from forensics.rescore.export import gather_tokens, read_export, sample_tables  # noqa: E402
from forensics.spike import SpikeOptions, run_spike  # noqa: E402
from forensics_testing.demo.build import DemoSpec, build_run  # noqa: E402
from forensics_testing.demo.train import iteration_batches, save, tiny_gpt2, train  # noqa: E402
from forensics_testing.repo_paths import REPO_ROOT  # noqa: E402

ROOT = REPO_ROOT
SPEC = DemoSpec(
    name="rescore",
    seed=7,
    seq_length=64,
    global_batch_size=8,
    train_iters=400,
    switch_iteration=201,
    spike_iteration=240,
    checkpoint_interval=50,
    log_tail=20,
    dirty_kind="mixed",
    docs_prose=150,
    docs_code=100,
    docs_per_crawl=30,
    crawls_v1=2,
    crawls_v2=2,
    vocab_size=800,
    blend_before={"prose": 0.5, "code": 0.3, "web": 0.2},
    blend_after={"prose": 0.3, "code": 0.2, "web": 0.1, "web_v2": 0.4},
)
WINDOW = (211, 240)
BASELINE = (100, 129)
TRAIN_ITERS = 200


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    torch.set_num_threads(1)  # two shared cores: more threads only contend
    root = tmp_path_factory.mktemp("rescore")
    truth = build_run(root / "run", SPEC, progress=False)
    replayer = open_replayer(load_config(root / "run" / "forensics.yaml"))
    trained = tiny_gpt2(SPEC.vocab_size, SPEC.seq_length)
    history = train(
        trained, iteration_batches(replayer, 1, TRAIN_ITERS), total=TRAIN_ITERS, peak_lr=3e-3
    )
    save(trained, root / "trained")
    save(tiny_gpt2(SPEC.vocab_size, SPEC.seq_length), root / "random")
    replay = pl.concat(
        [
            replayer.replay(*WINDOW, progress=False).with_columns(pl.lit("window").alias("side")),
            replayer.replay(*BASELINE, progress=False).with_columns(
                pl.lit("baseline").alias("side")
            ),
        ]
    )
    return {
        "root": root,
        "truth": truth,
        "replayer": replayer,
        "replay": replay,
        "history": history,
        "model": trained,
    }


def _kinds(run: dict, segments: pl.DataFrame) -> pl.DataFrame:
    """segments + kind: spam / mojibake (the dirty batch's, told apart by their text) / clean."""
    dirty = set(run["truth"]["dirty_doc_ids"])
    docs = run["replayer"].documents(segments.select("dataset", "doc_id").unique(), progress=False)
    is_dirty = pl.struct("dataset", "doc_id").map_elements(
        lambda s: s["dataset"] == "web_v2" and s["doc_id"] in dirty, return_dtype=pl.Boolean
    )
    kinds = docs.with_columns(
        pl.when(~is_dirty)
        .then(pl.lit("clean"))
        .when(pl.col("text").str.contains("People also search for"))
        .then(pl.lit("spam"))
        .otherwise(pl.lit("mojibake"))
        .alias("kind")
    ).select("dataset", "doc_id", "kind")
    return segments.join(kinds, on=["dataset", "doc_id"])


def _scored(run: dict, name: str, **kw) -> object:
    options = RescoreOptions(checkpoint=run["root"] / name, progress=False, **kw)
    return rescore(run["replayer"], run["replay"], options, cache_dir=run["root"] / "cache")


def test_exported_tokens_are_megatron_cores_samples(tmp_path, megatron, megatron_build) -> None:
    """Every sample of a three-way blend (uint16 and int32 datasets): our gather == the tokens
    megatron-core's BlendedDataset serves (tokens + the last label)."""
    import importlib.util

    from conftest import random_documents

    # The Megatron equivalence tests' run builders, by path: that folder is on sys.path only
    # when pytest collected it first (a subset run may not).
    where = REPO_ROOT / "tests" / "dataloaders" / "megatron" / "test_megatron_equivalence.py"
    spec = importlib.util.spec_from_file_location("megatron_equivalence_builders", where)
    assert spec is not None and spec.loader is not None
    builders = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builders)
    _config, _write = builders._config, builders._write

    rng = np.random.default_rng(3)
    prefixes = [
        _write(tmp_path, "a", random_documents(rng, 200, 50_000, 1, 150), np.uint16),
        _write(tmp_path, "b", random_documents(rng, 80, 100_000, 5, 400), np.int32, megatron),
        _write(tmp_path, "c", random_documents(rng, 30, 60_000, 50, 700), np.uint16, megatron),
    ]
    weights = [0.5, 0.3, 0.2]
    (train_ds, _, _) = megatron_build(prefixes, weights, [2000, 0, 0], seed=11, seq_length=40)
    from dataloaders.megatron.replayer import MegatronReplayer

    replayer = MegatronReplayer(
        _config(prefixes, weights, gbs=20, iters=100, seed=11, seq_length=40)
    )
    samples, segments = sample_tables(replayer.replay(1, 100, progress=False))
    tokens = gather_tokens(replayer, segments)
    assert tokens.shape == (2000, 41) and tokens.dtype == np.int32
    for row, s in samples.select("row", "sample_index").iter_rows():
        item = train_ds[int(s)]
        ref = np.concatenate([item["tokens"].numpy(), item["labels"].numpy()[-1:]])
        np.testing.assert_array_equal(tokens[row], ref, err_msg=f"sample {s}")


def test_sample_loss_is_transformers_loss_and_segments_add_up(run: dict) -> None:
    from forensics.rescore.checkpoint import token_losses

    result = _scored(run, "trained")
    length = SPEC.seq_length
    segs = result.segments.group_by("row").agg(pl.col("loss_sum").sum(), pl.col("tokens").sum())
    joined = result.samples.join(segs, on="row").sort("row")
    assert (joined["tokens"] == length).all()
    np.testing.assert_allclose(
        joined["loss_sum"].to_numpy() / length, joined["loss"].to_numpy(), rtol=1e-5
    )
    model = run["model"]
    for row in (0, 7, result.samples.height - 1):
        sample = result.tokens[row : row + 1]
        mine = token_losses(model, sample)[0]
        assert float(mine.mean()) == pytest.approx(result.samples["loss"][row], rel=1e-5)
        # transformers' own loss: labels = inputs, shifted inside the model, so it scores the
        # predictions of tokens 1..L-1 of the input (all of ours but the extra label token)
        ids = torch.as_tensor(sample[:, :-1].astype(np.int64))
        with torch.no_grad():
            ref = float(model(input_ids=ids, labels=ids).loss)
        assert float(mine[:-1].mean()) == pytest.approx(ref, rel=1e-5)


def test_injected_garbage_surprises_a_trained_model_not_a_random_one(run: dict) -> None:
    first, last = run["history"][0][1], run["history"][-1][1]
    assert last < first - 0.8  # the trained model learnt something
    trained = _kinds(run, _scored(run, "trained").segments)
    rand = _kinds(run, _scored(run, "random").segments)
    t = trained.group_by("kind").agg(pl.col("loss_z").mean(), pl.col("max_token_z").mean())
    r = rand.group_by("kind").agg(pl.col("loss_z").mean(), pl.col("max_token_z").mean())
    tz = {k: (a, b) for k, a, b in t.iter_rows()}
    rz = {k: (a, b) for k, a, b in r.iter_rows()}
    # measured over runs: clean (0.0, +0.1), mojibake (+0.6..+1.0, +0.9..+2.2), spam (+0.5,
    # +0.1) for the trained model; mojibake (-0.6..-0.4, -0.4..-0.2) for the random one
    assert abs(tz["clean"][0]) < 0.3 and abs(tz["clean"][1]) < 0.3, tz
    # Byte soup the model never saw: its worst token stands out clearly; its mean loss less so
    # (+0.15 to +1.0 over corpora), but always above clean text and above the random model's.
    assert tz["mojibake"][1] > tz["clean"][1] + 0.5, tz
    assert tz["mojibake"][0] > tz["clean"][0] + 0.1, tz
    assert tz["mojibake"][0] > rz["mojibake"][0] + 0.3, (tz, rz)
    assert tz["spam"][0] > tz["clean"][0] + 0.25, tz  # slot-filled template pages
    assert rz["mojibake"][0] < 0.3, rz  # the random model is not surprised by the byte soup


def test_cache_is_keyed_by_checkpoint_content(run: dict) -> None:
    hits: dict[str, bool] = {}
    opts = RescoreOptions(checkpoint=run["root"] / "trained", progress=False)
    cache = run["root"] / "cache-key"
    a = rescore(run["replayer"], run["replay"], opts, cache_dir=cache, hits=hits)
    assert hits["rescore"] is False
    b = rescore(run["replayer"], run["replay"], opts, cache_dir=cache, hits=hits)
    assert hits["rescore"] is True
    assert a.samples["loss"].to_list() == b.samples["loss"].to_list()
    other = RescoreOptions(checkpoint=run["root"] / "random", progress=False)
    c = rescore(run["replayer"], run["replay"], other, cache_dir=cache, hits=hits)
    assert hits["rescore"] is False
    assert c.samples["loss"].to_list() != a.samples["loss"].to_list()


def test_grad_norm_is_torchs_total_norm_and_gets_a_z_score(run: dict) -> None:
    """Per-sample gradient norm == torch.nn.utils.clip_grad_norm_'s total norm (what Megatron and
    HF trainers log) of that sample's mean loss; --grad-norm puts it into rescore.parquet."""
    from forensics.rescore.checkpoint import grad_norms

    result = _scored(run, "trained", cap=12, grad_norm=True)
    assert result.samples["grad_norm_z"].null_count() == 0
    model = run["model"]
    tokens = result.tokens[:2]
    ours = grad_norms(model, tokens)
    for i in range(2):
        ids = torch.as_tensor(tokens[i : i + 1].astype(np.int64))
        model.zero_grad(set_to_none=True)
        logits = model(input_ids=ids[:, :-1]).logits
        torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids[:, 1:]).backward()
        ref = float(torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")))
        assert ours[i] == pytest.approx(ref, rel=1e-4)
    model.zero_grad(set_to_none=True)


def test_stratified_cap_keeps_every_dataset(run: dict) -> None:
    result = _scored(run, "trained", cap=20)
    assert result.info["window_samples"] == 20 and result.info["baseline_samples"] == 20
    window_rows = result.samples.filter(pl.col("side") == "window")["row"].implode()
    seen = set(result.segments.filter(pl.col("row").is_in(window_rows))["dataset"].to_list())
    assert seen == {"prose", "code", "web", "web_v2"}


def _spike(run: dict, out: Path, rescore_opts: RescoreOptions | None):
    return run_spike(
        run["root"] / "run" / "forensics.yaml",
        out,
        SpikeOptions(
            step=WINDOW[1],
            window=WINDOW[1] - WINDOW[0] + 1,
            baseline=f"{BASELINE[0]}-{BASELINE[1]}",
            embed_cap=0,
            progress=False,
            rescore=rescore_opts,
        ),
    )


def test_losses_file_and_checkpoint_give_the_same_report(run: dict) -> None:
    """The same numbers through --checkpoint and through --losses: the same model section and
    verdicts. The losses are computed outside our code path: transformers over the export."""
    root = run["root"]
    with_ckpt = _spike(run, root / "spike-ckpt", RescoreOptions(checkpoint=root / "trained"))
    from forensics.replay import replay_sides
    from forensics.rescore.export import write_export

    sides = replay_sides(run["replayer"], {"window": WINDOW, "baseline": BASELINE}, False)
    write_export(run["replayer"], sides, root / "export", {"window": list(WINDOW)})
    tokens, samples, _, meta = read_export(root / "export")
    assert meta["sample_length"] == SPEC.seq_length + 1
    model = run["model"]
    rows = []
    with torch.no_grad():
        for row, it, pos in samples.select("row", "iteration", "position").iter_rows():
            ids = torch.as_tensor(np.asarray(tokens[row : row + 1], dtype=np.int64))
            logits = model(input_ids=ids[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(
                logits.transpose(1, 2), ids[:, 1:], reduction="none"
            )
            rows.append({"iteration": it, "position": pos, "token_losses": loss[0].tolist()})
    pl.DataFrame(rows).write_parquet(root / "losses.parquet")
    with_file = _spike(run, root / "spike-file", RescoreOptions(losses=root / "losses.parquet"))
    a = json.loads((root / "spike-ckpt" / "report.json").read_text())
    b = json.loads((root / "spike-file" / "report.json").read_text())
    assert a["culprit"] == b["culprit"]
    assert [c["verdict"] for c in a["clusters"]] == [c["verdict"] for c in b["clusters"]]
    for x, y in zip(a["model"]["clusters"], b["model"]["clusters"], strict=True):
        assert x["id"] == y["id"] and x["combined"] == y["combined"]
        assert x["loss_z"] == pytest.approx(y["loss_z"], abs=1e-4)
    assert a["model"]["agreement"].split("(")[0] == b["model"]["agreement"].split("(")[0]
    assert with_ckpt.skip.iterations == with_file.skip.iterations
    assert (root / "spike-ckpt" / "rescore.parquet").is_file()
    # the data-side culprit (the dirty crawl batch) is confirmed by the trained model
    top = a["culprit"]
    model_row = next(c for c in a["model"]["clusters"] if c["id"] == top)
    assert model_row["name"] == f"crawl_batch={run['truth']['dirty_crawl_batch']}"
    assert model_row["combined"] == "culprit, confirmed by the model"
    md = (root / "spike-ckpt" / "report.md").read_text()
    assert "What the model choked on" in md and "\u27e6" in md


def test_per_sample_losses_give_the_same_sample_z_scores(run: dict, tmp_path) -> None:
    """--losses with one mean loss per sample: the same per-sample z's as the checkpoint's; no
    segment losses (clusters then take the z of the samples holding their documents)."""
    from forensics.rescore.verdict import _units

    ckpt = _scored(run, "trained")
    path = tmp_path / "per_sample.parquet"
    ckpt.samples.select("iteration", "position", "loss").write_parquet(path)
    mine = rescore(run["replayer"], run["replay"], RescoreOptions(losses=path, progress=False))
    assert mine.info["level"] == "sample" and "loss" not in mine.segments.columns
    a = ckpt.samples.sort("iteration", "position")
    b = mine.samples.sort("iteration", "position")
    np.testing.assert_allclose(b["loss_z"].to_numpy(), a["loss_z"].to_numpy(), rtol=1e-9)
    units = _units(mine)
    assert units.height and units["loss_z"].null_count() == 0


def test_report_says_when_no_checkpoint_was_given(run: dict) -> None:
    _spike(run, run["root"] / "spike-none", None)
    report = json.loads((run["root"] / "spike-none" / "report.json").read_text())
    assert report["model"] is None
    labels = {label: text for label, text in report["summary"]}
    assert labels["MODEL"].startswith("no checkpoint given")


def test_random_model_demotes_the_culprit_to_a_suspect(run: dict) -> None:
    """A model that is surprised by nothing cannot confirm the data side: the crawl batch stays
    a suspect, not a culprit, and nothing is skipped for it."""
    result = _spike(
        run, run["root"] / "spike-random", RescoreOptions(checkpoint=run["root"] / "random")
    )
    report = json.loads((run["root"] / "spike-random" / "report.json").read_text())
    batch = f"crawl_batch={run['truth']['dirty_crawl_batch']}"
    row = next(c for c in report["model"]["clusters"] if c["name"] == batch)
    assert row["combined"] == "suspect: new and dirty, but the model was not surprised"
    assert report["culprit"] != row["id"]
    assert row["id"] not in result.skip.culprit_clusters


# -- bad input ----------------------------------------------------------------------------------


def test_checkpoint_with_a_smaller_vocabulary_is_refused(run: dict, tmp_path) -> None:
    save(tiny_gpt2(100, SPEC.seq_length), tmp_path / "small")
    with pytest.raises(ForensicsError, match="vocabulary has 100 ids but the samples hold"):
        _scored({**run, "root": tmp_path}, "small")


def test_a_directory_that_is_not_a_causal_lm_is_refused(run: dict, tmp_path) -> None:
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=900, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64)).save_pretrained(
        tmp_path / "bert"
    )  # fmt: skip
    with pytest.raises(
        ForensicsError, match="'bert' model \\(BertModel\\) is not a causal language model"
    ):
        _scored({**run, "root": tmp_path}, "bert")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ForensicsError, match="no config.json"):
        RescoreOptions(checkpoint=tmp_path / "empty").check()


def test_an_incomplete_megatron_torch_dist_checkpoint_is_refused(tmp_path) -> None:
    ckpt = tmp_path / "iter_0000200"
    ckpt.mkdir()
    (ckpt / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
    (ckpt / "__0_0.distcp").write_bytes(b"")
    with pytest.raises(
        ForensicsError, match="iter_0000200: a Megatron torch_dist checkpoint without common.pt"
    ):
        RescoreOptions(checkpoint=ckpt).check()


def test_losses_file_that_does_not_match_the_window_is_refused(run: dict, tmp_path) -> None:
    bad = tmp_path / "other.parquet"
    pl.DataFrame({"iteration": [5, 212], "position": [0, 0], "loss": [1.0, 2.0]}).write_parquet(bad)
    with pytest.raises(ForensicsError, match="not samples of this window.*iteration 5 position 0"):
        rescore(run["replayer"], run["replay"], RescoreOptions(losses=bad, progress=False))
    short = tmp_path / "short.parquet"
    pl.DataFrame(
        {"iteration": [212, 100], "position": [0, 0], "token_losses": [[1.0] * 10, [1.0] * 10]}
    ).write_parquet(short)
    with pytest.raises(ForensicsError, match="has 10 token losses.*have 64"):
        rescore(run["replayer"], run["replay"], RescoreOptions(losses=short, progress=False))
    window_only = tmp_path / "window.parquet"
    pl.DataFrame({"iteration": [212], "position": [0], "loss": [1.0]}).write_parquet(window_only)
    with pytest.raises(ForensicsError, match="no losses for baseline samples"):
        rescore(run["replayer"], run["replay"], RescoreOptions(losses=window_only, progress=False))


def test_cli_replay_tokens_and_a_one_line_error(run: dict, tmp_path) -> None:
    config = run["root"] / "run" / "forensics.yaml"
    out = tmp_path / "tok"
    cmd = [sys.executable, "-m", "forensics.cli", "replay", "--config", str(config), "--step",
           "240", "--window", "5", "--out", str(tmp_path / "r.parquet"), "--tokens", str(out),
           "--no-progress"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    tokens, samples, segments, meta = read_export(out)
    assert tokens.shape == (5 * SPEC.global_batch_size, SPEC.seq_length + 1)
    assert samples["iteration"].min() == 236 and meta["window"] == [236, 240]
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1, again.stderr
    bad = [sys.executable, "-m", "forensics.cli", "rescore", "--config", str(config),
           "--step", "240", "--window", "30", "--checkpoint", str(tmp_path),
           "--out", str(tmp_path / "o")]  # fmt: skip
    done = subprocess.run(bad, capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and "no config.json" in done.stderr
    good = [*bad[:-4], "--checkpoint", str(run["root"] / "trained"), "--rescore-cap", "16",
            "--baseline", f"{BASELINE[0]}-{BASELINE[1]}", "--out", str(tmp_path / "o"),
            "--quiet"]  # fmt: skip
    done = subprocess.run(good, capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    table = pl.read_parquet(tmp_path / "o" / "rescore.parquet")
    assert table.height == 32 and table["segments"].list.len().min() >= 1
    assert {"loss_z", "max_token_z", "grad_norm_z"} <= set(table.columns)
