"""Our index arrays and replayed tokens against megatron-core 0.16.1 itself.

Each configuration builds the datasets with megatron-core's BlendedMegatronDatasetBuilder and with
our replayer, then requires every index array (values and dtype) and the tokens of every sample to
be identical.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import random_documents

from dataloaders.megatron.indexed import (
    IndexedDataset,
    IndexedDatasetWriter,
    write_indexed_dataset,
)
from dataloaders.megatron.replayer import MegatronReplayer
from dataloaders.megatron.sources import GPTSource
from dataloaders.run_config import config_from_dict

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _write(tmp: Path, name: str, docs: list[np.ndarray], dtype, megatron=None) -> Path:
    """Write with ours, or with megatron-core's IndexedDatasetBuilder when `megatron` is given."""
    prefix = tmp / name
    if megatron is None:
        write_indexed_dataset(prefix, docs, dtype)
    else:
        builder = megatron.indexed.IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
        for doc in docs:
            builder.add_document(torch.from_numpy(np.asarray(doc, dtype=dtype)), [len(doc)])
        builder.finalize(f"{prefix}.idx")
    return prefix


def _config(
    prefixes: list[Path],
    weights: list[float] | None,
    *,
    gbs: int,
    iters: int,
    seed: int = 1234,
    seq_length: int = 64,
    split: str = "90,8,2",
    cache: Path | None = None,
    extra: bool = True,
):
    blend = []
    for i, prefix in enumerate(prefixes):
        entry = {"prefix": str(prefix), "name": f"d{i}"}
        if weights is not None:
            entry["weight"] = weights[i]
        blend.append(entry)
    data = {
        "format": "megatron",
        "seed": seed,
        "seq_length": seq_length,
        "split": split,
        "add_extra_token": extra,
        "blend": blend,
    }
    if cache is not None:
        data["cache_path"] = str(cache)
    raw = {"data": data, "training": {"global_batch_size": gbs, "train_iters": iters}}
    return config_from_dict(raw, base_dir=Path("/"), source=None)


def _assert_gpt_equal(ours: GPTSource, theirs) -> None:
    sample_index = ours.full_sample_index()
    for name, mine, ref in (
        ("document_index", ours.document_index, theirs.document_index),
        ("sample_index", sample_index, theirs.sample_index),
        ("shuffle_index", ours.shuffle_index, theirs.shuffle_index),
    ):
        assert mine.dtype == ref.dtype, name
        np.testing.assert_array_equal(mine, ref, err_msg=name)


def _assert_tokens_equal(replayer: MegatronReplayer, theirs, extra: bool) -> None:
    """Every sample of the run: our segments' tokens == megatron-core's sample tokens."""
    table = replayer.replay(1, replayer.last_iteration, progress=False)
    names = [src.name for src in replayer.stage(0).sources]
    seq_length = replayer.data.seq_length
    for sample, group in table.group_by("sample_index", maintain_order=True):
        (s,) = sample
        parts = [
            np.asarray(replayer._doc_tokens(n, d, a, b), dtype=np.int64)
            for n, d, a, b in group.select("dataset", "doc_id", "token_start", "token_end").rows()
        ]
        mine = np.concatenate(parts)
        if hasattr(theirs, "dataset_index"):
            k, m = int(theirs.dataset_index[s]), int(theirs.dataset_sample_index[s])
            assert names[k] == group["dataset"][0]
            ref, ids = theirs.datasets[k]._query_document_sample_shuffle_indices(m)
        else:
            ref, ids = theirs._query_document_sample_shuffle_indices(s)
        assert len(mine) == seq_length + int(extra)
        np.testing.assert_array_equal(mine, ref, err_msg=f"sample {s}")
        # Megatron's ids are sequence ids; ours are documents (they differ with split sentences).
        ds = replayer.datasets[replayer.specs[group["dataset"][0]].prefix]
        docs = np.searchsorted(ds.document_indices, ids, side="right") - 1
        np.testing.assert_array_equal(group["doc_id"].to_numpy(), docs, err_msg=f"docs {s}")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, megatron) -> dict[str, Path]:
    """Three datasets: uint16 (ours), int32 (megatron's builder), uint16 (megatron's builder)."""
    tmp = tmp_path_factory.mktemp("corpus")
    rng = np.random.default_rng(42)
    return {
        "web": _write(tmp, "web", random_documents(rng, 300, 50_000, 1, 120), np.uint16),
        "code": _write(
            tmp, "code", random_documents(rng, 150, 100_000, 5, 300), np.int32, megatron
        ),
        "books": _write(
            tmp, "books", random_documents(rng, 40, 60_000, 50, 900), np.uint16, megatron
        ),
    }


def test_single_dataset_several_epochs_separate_final(corpus, megatron_build) -> None:
    """One prefix, no weight: a plain GPTDataset over ~3.2 epochs, final epoch separate."""
    web = IndexedDataset(corpus["web"])
    tokens = int(web.sequence_lengths[: round(0.9 * len(web))].sum())
    n = (tokens * 3 + tokens // 5) // 64
    gbs = 8
    iters = n // gbs
    (train, _, _) = megatron_build([corpus["web"]], None, [iters * gbs, 0, 0], seq_length=64)
    replayer = MegatronReplayer(_config([corpus["web"]], None, gbs=gbs, iters=iters))
    source = replayer.stage(0).sources[0]
    assert len(source.document_index) == 4 * round(0.9 * len(web))
    first_epochs = (3 * tokens - 1) // 64
    assert iters * gbs - first_epochs < int(0.8 * ((tokens - 1) // 64))  # separate
    _assert_gpt_equal(source, train)
    _assert_tokens_equal(replayer, train, True)


def test_three_way_blend_int32_and_uint16(corpus, megatron_build) -> None:
    prefixes = [corpus["web"], corpus["code"], corpus["books"]]
    weights = [0.5, 0.3, 0.2]
    (train, _, _) = megatron_build(prefixes, weights, [4000, 0, 0], seed=7, seq_length=48)
    replayer = MegatronReplayer(
        _config(prefixes, weights, gbs=40, iters=100, seed=7, seq_length=48)
    )
    stage = replayer.stage(0)
    assert stage.size == len(train)
    for ours, theirs in zip(stage.sources, train.datasets, strict=True):
        assert ours.num_samples == theirs.num_samples
        _assert_gpt_equal(ours, theirs)
    stage.lookup(np.arange(stage.size))
    np.testing.assert_array_equal(stage.dataset_index, train.dataset_index)
    np.testing.assert_array_equal(stage.dataset_sample_index, train.dataset_sample_index)
    assert stage.dataset_index.dtype == train.dataset_index.dtype
    _assert_tokens_equal(replayer, train, True)


def test_megatron_cache_is_read_and_matches(corpus, megatron_build, tmp_path) -> None:
    """megatron-core writes --data-cache-path; our replayer reads those .npy files."""
    prefixes = [corpus["web"], corpus["code"]]
    weights = [2.0, 1.0]
    cache = tmp_path / "data-cache"
    (train, _, _) = megatron_build(prefixes, weights, [3000, 0, 0], seed=99, cache=cache)
    assert len(list(cache.glob("*-BlendedDataset-train-dataset_index.npy"))) == 1
    replayer = MegatronReplayer(_config(prefixes, weights, gbs=30, iters=100, seed=99, cache=cache))
    stage = replayer.stage(0)
    assert stage.origin.startswith("megatron cache")
    assert all(src.origin.startswith("megatron cache") for src in stage.sources)
    assert isinstance(stage.dataset_index, np.memmap)
    np.testing.assert_array_equal(stage.dataset_index, train.dataset_index)
    for ours, theirs in zip(stage.sources, train.datasets, strict=True):
        assert isinstance(ours.shuffle_index, np.memmap)
        _assert_gpt_equal(ours, theirs)
    # The same config built from nothing gives the same table as the cached one.
    fresh = MegatronReplayer(_config(prefixes, weights, gbs=30, iters=100, seed=99))
    assert fresh.stage(0).origin == "built"
    assert fresh.replay(90, 100, progress=False).equals(replayer.replay(90, 100, progress=False))


def test_valid_split_with_nonzero_start(corpus, megatron_build, megatron) -> None:
    """The split's documents start past 0: beg = round(0.8 * N)."""
    (_, valid, _) = megatron_build([corpus["books"]], None, [10, 500, 0], split="80,20,0")
    config = _config([corpus["books"]], None, gbs=1, iters=10, split="80,20,0")
    ds = IndexedDataset(corpus["books"])
    ours = GPTSource("books", corpus["books"], ds, 500, config.data, split_index=1)
    assert ours.documents[0] == round(0.8 * len(ds)) > 0
    _assert_gpt_equal(ours, valid)


def test_no_extra_token_several_epochs_not_separate(corpus, megatron_build) -> None:
    code = IndexedDataset(corpus["code"])
    tokens = int(code.sequence_lengths[: round(0.9 * len(code))].sum())
    n = (tokens * 2 + (tokens * 9) // 10) // 32  # 2.9 epochs: final epoch kept in the shuffle
    (train, _, _) = megatron_build(
        [corpus["code"]], None, [n, 0, 0], seq_length=32, split="90,10,0", extra=False
    )
    replayer = MegatronReplayer(
        _config([corpus["code"]], None, gbs=n, iters=1, seq_length=32, split="90,10", extra=False)
    )
    source = replayer.stage(0).sources[0]
    assert len(source.document_index) == 3 * round(0.9 * len(code))
    _assert_gpt_equal(source, train)
    _assert_tokens_equal(replayer, train, False)


def test_unweighted_blend_sized_by_dataset_lengths(corpus, megatron_build) -> None:
    prefixes = [corpus["web"], corpus["books"]]
    (train, _, _) = megatron_build(prefixes, None, [200, 0, 0], seed=5)
    replayer = MegatronReplayer(_config(prefixes, None, gbs=20, iters=10, seed=5))
    stage = replayer.stage(0)
    assert stage.size == len(train) == 200
    np.testing.assert_allclose(stage.weights, train.weights, rtol=0, atol=0)
    for ours, theirs in zip(stage.sources, train.datasets, strict=True):
        _assert_gpt_equal(ours, theirs)
    _assert_tokens_equal(replayer, train, True)


def test_own_cache_round_trip(corpus, _private_forensics_cache) -> None:
    prefixes = [corpus["web"], corpus["code"]]
    config = _config(prefixes, [0.6, 0.4], gbs=16, iters=50)
    first = MegatronReplayer(config)
    table = first.replay(41, 50, progress=False)
    first.save_cache()
    assert list(_private_forensics_cache.rglob("*.npy"))
    warm = MegatronReplayer(config)
    assert warm.stage(0).origin == "forensics cache"
    assert all(src.origin == "forensics cache" for src in warm.stage(0).sources)
    assert warm.replay(41, 50, progress=False).equals(table)


def test_own_cache_misses_an_index_rewritten_at_the_same_size(
    tmp_path, _private_forensics_cache
) -> None:
    """The documents reordered (same sizes, same byte count) and the mtime put back: the cache
    is keyed by the index's content, so the replay rebuilds instead of reading the old order."""
    import os

    rng = np.random.default_rng(5)
    docs = random_documents(rng, 60, 30_000, 5, 200)
    prefix = _write(tmp_path, "web", docs, np.uint16)
    config = _config([prefix], None, gbs=8, iters=20)
    first = MegatronReplayer(config)
    first.replay(1, 20, progress=False)
    first.save_cache()
    idx = Path(f"{prefix}.idx")
    stat = idx.stat()
    _write(tmp_path, "web", docs[::-1], np.uint16)
    os.utime(idx, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert idx.stat().st_size == stat.st_size and idx.stat().st_mtime_ns == stat.st_mtime_ns
    again = MegatronReplayer(config)
    assert all(src.origin == "built" for src in again.stage(0).sources)


def test_split_sentences_dataset(tmp_path, megatron_build) -> None:
    """Documents of several sequences: Megatron samples sequences; we report documents, with
    token offsets inside the document."""
    rng = np.random.default_rng(8)
    with IndexedDatasetWriter(tmp_path / "sent", np.uint16) as out:
        for _ in range(120):
            lengths = [int(x) for x in rng.integers(1, 40, int(rng.integers(1, 4)))]
            out.add_document(rng.integers(0, 60_000, sum(lengths)), lengths)
    prefix = tmp_path / "sent"
    (train, _, _) = megatron_build([prefix], None, [300, 0, 0], seq_length=32)
    replayer = MegatronReplayer(_config([prefix], None, gbs=10, iters=30, seq_length=32))
    ds = replayer.datasets[prefix]
    assert len(ds) > ds.num_documents
    _assert_gpt_equal(replayer.stage(0).sources[0], train)
    _assert_tokens_equal(replayer, train, True)


def test_single_prefix_with_a_weight_is_a_blend(corpus, megatron_build) -> None:
    """`--data-path 1.0 web` makes megatron-core build a one-dataset BlendedDataset (surplus
    included), unlike `--data-path web`."""
    (train, _, _) = megatron_build([corpus["books"]], [1.0], [500, 0, 0], seed=3)
    replayer = MegatronReplayer(_config([corpus["books"]], [1.0], gbs=50, iters=10, seed=3))
    stage = replayer.stage(0)
    assert stage.blended and stage.sources[0].num_samples == train.datasets[0].num_samples == 503
    _assert_gpt_equal(stage.sources[0], train.datasets[0])
    _assert_tokens_equal(replayer, train, True)


def test_stage_switch_and_resume_sample_for_sample(corpus, megatron_build) -> None:
    """A mixture switch at iteration 41 (a restart with a new --data-path) and a later restart
    that restored other consumed samples: each iteration's samples are megatron-core's new blend
    read from the consumed-samples count, as Megatron's pretraining sampler starts there
    (consumed_samples .. consumed_samples + global batch; dp 1)."""
    gbs, iters = 16, 100
    first_blend = ([corpus["web"], corpus["code"]], [0.6, 0.4])
    second_blend = ([corpus["web"], corpus["books"]], [0.3, 0.7])
    raw = {
        "data": {
            "format": "megatron",
            "seed": 11,
            "seq_length": 48,
            "split": "90,8,2",
            "stages": [
                {
                    "start_iteration": 1,
                    "blend": [
                        {"prefix": str(p), "name": f"a{i}", "weight": w}
                        for i, (p, w) in enumerate(zip(*first_blend, strict=True))
                    ],
                },
                {
                    "start_iteration": 41,
                    "blend": [
                        {"prefix": str(p), "name": f"b{i}", "weight": w}
                        for i, (p, w) in enumerate(zip(*second_blend, strict=True))
                    ],
                },
            ],
        },
        "training": {
            "global_batch_size": gbs,
            "train_iters": iters,
            "resumes": [{"iteration": 71, "consumed_samples": 1000}],
        },
    }
    replayer = MegatronReplayer(config_from_dict(raw, base_dir=Path("/"), source=None))
    theirs = [
        megatron_build(blend[0], blend[1], [iters * gbs, 0, 0], seed=11, seq_length=48)[0]
        for blend in (first_blend, second_blend)
    ]
    # The sampler's start per iteration, counted as Megatron's loop does (no schedule of ours).
    consumed, start_of = 0, {}
    for it in range(1, iters + 1):
        consumed = 1000 if it == 71 else consumed
        start_of[it] = consumed
        consumed += gbs
    table = replayer.replay(35, 75, progress=False)
    for (it, pos), group in table.group_by(["iteration", "position"], maintain_order=True):
        stage = 0 if it < 41 else 1
        assert group["stage"][0] == stage
        blend = theirs[stage]
        s = start_of[it] + pos
        assert group["sample_index"][0] == s
        k, m = int(blend.dataset_index[s]), int(blend.dataset_sample_index[s])
        ref, _ = blend.datasets[k]._query_document_sample_shuffle_indices(m)
        mine = np.concatenate(
            [
                np.asarray(replayer._doc_tokens(n, d, a, b), dtype=np.int64)
                for n, d, a, b in group.select(
                    "dataset", "doc_id", "token_start", "token_end"
                ).rows()
            ]
        )
        np.testing.assert_array_equal(mine, ref, err_msg=f"iteration {it} position {pos}")
