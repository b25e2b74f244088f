"""StreamingDataset's shuffle algorithms, transcribed from mosaicml-streaming 0.13.0.

Why a transcription and not an import: the runtime cannot have the library. mosaicml-streaming
pins numpy<2.2 and transformers<5 (our environment has newer ones), and `import streaming`
imports torch, torchvision and transformers before any of these numpy-only functions. So each
function below is the library's, line for line in numpy (same RNG calls in the same order, so the
same PCG64 streams), with the source cited. Source: mosaicml/streaming at commit
89e7bb9082457a59f6efcfa4ef910102e07a9729, whose streaming/base/ is byte-identical to the 0.13.0
wheel; tests/dataloaders/mosaic/test_mosaic_order.py checks every algorithm against the
installed library.

Each `get_shuffle_*` maps an epoch's (resampled) shard sizes to a permutation of sample ids:
    ids  int64[sum(shard_sizes)]  ids[k] = the sample placed at position k of the epoch
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

Span = tuple[int, int]


def _shard_spans(shard_sizes: np.ndarray) -> tuple[list[Span], int]:
    """(begin, end) sample-id span of every shard, and the total (py1s.py:100-106)."""
    spans: list[Span] = []
    num_samples = 0
    for size in shard_sizes:
        spans.append((num_samples, num_samples + int(size)))
        num_samples += int(size)
    return spans, num_samples


def divide_spans(spans: list[Span], num_samples: int, num_parts: int) -> tuple[list[Span], list]:
    """Cut the shard spans at canonical-node boundaries (py1s.py:17-75).

    Returns (out_spans, super_spans): out_spans are the pieces in order; super_spans[p] is the
    (begin, end) range of out_spans indices that make up canonical node p. Mutates `spans`.
    """
    begin_part = 0
    span_index = 0
    samples_so_far = 0
    out_spans: list[Span] = []
    super_spans: list[Span] = []
    for part in range(num_parts):
        part_end = num_samples * (part + 1) // num_parts
        while True:
            if span_index == len(spans):
                break
            span = spans[span_index]
            samples_this_span = span[1] - span[0]
            if part_end < samples_so_far + samples_this_span:
                if samples_so_far < part_end:
                    split = part_end - samples_so_far
                    out_spans.append((span[0], span[0] + split))
                    spans[span_index] = (span[0] + split, span[1])
                    samples_so_far += split
                break
            out_spans.append(span)
            span_index += 1
            samples_so_far += samples_this_span
        super_spans.append((begin_part, len(out_spans)))
        begin_part = len(out_spans)
    return out_spans, super_spans


def _run_then_epoch_spans(
    shard_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int
) -> tuple[list[Span], list[Span], int, np.random.Generator]:
    """The shared first half of py1s / py1br / py1e (py1s.py:100-118, py1br.py:38-56,
    py1e.py:41-59): shards shuffled once per run (seed), cut at canonical nodes, pieces shuffled
    within each node per epoch (seed + epoch). Returns the epoch RNG for the caller to go on."""
    spans, num_samples = _shard_spans(shard_sizes)
    run_rng = np.random.default_rng(seed)
    run_rng.shuffle(spans)
    spans, super_spans = divide_spans(spans, num_samples, num_canonical_nodes)
    epoch_rng = np.random.default_rng(seed + epoch)
    for begin, end in super_spans:
        part = spans[begin:end]
        epoch_rng.shuffle(part)
        spans[begin:end] = part
    return spans, super_spans, num_samples, epoch_rng


def get_shuffle_py1s(
    shard_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int, block_size: int
) -> np.ndarray:
    """py1s: shuffle within each shard piece (py1s.py:78-128); block_size is unused."""
    spans, _, num_samples, epoch_rng = _run_then_epoch_spans(
        shard_sizes, num_canonical_nodes, seed, epoch
    )
    ids = np.empty(num_samples, np.int64)
    offset = 0
    for begin, end in spans:
        size = end - begin
        ids[offset : offset + size] = np.arange(begin, end)
        epoch_rng.shuffle(ids[offset : offset + size])
        offset += size
    return ids


def get_shuffle_py1br(
    shard_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int, block_size: int
) -> np.ndarray:
    """py1br: shuffle within staggered blocks of random size 0.75..1.25 x block_size
    (py1br.py:16-92)."""
    spans, node_spans, num_samples, epoch_rng = _run_then_epoch_spans(
        shard_sizes, num_canonical_nodes, seed, epoch
    )
    ids = np.empty(num_samples, np.int64)
    node_stop_sample = 0
    stagger = epoch_rng.integers(0, int(0.75 * block_size), (num_canonical_nodes,))
    for node, (node_start_span, node_stop_span) in enumerate(node_spans):
        node_start_sample = node_stop_sample
        for span_start, span_stop in spans[node_start_span:node_stop_span]:
            size = span_stop - span_start
            ids[node_stop_sample : node_stop_sample + size] = np.arange(span_start, span_stop)
            node_stop_sample += size
        ranges = []
        blocks_end = node_start_sample
        node_stagger = stagger[node]
        while blocks_end < node_stop_sample:
            rand_block_size = epoch_rng.integers(int(0.75 * block_size), int(1.25 * block_size))
            start = max(blocks_end - node_stagger, node_start_sample)
            stop = min(blocks_end + rand_block_size - node_stagger, node_stop_sample)
            ranges.append((start, stop))
            blocks_end += stop - start
        for start, stop in ranges:
            epoch_rng.shuffle(ids[start:stop])
    return ids


def get_shuffle_py1e(
    shard_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int, block_size: int
) -> np.ndarray:
    """py1e (the default): every piece's samples shuffled, then spread by a uniform shift within
    a random 0.75..1.25 x block_size range and sorted by position (py1e.py:19-136)."""
    spans, super_spans, num_samples, epoch_rng = _run_then_epoch_spans(
        shard_sizes, num_canonical_nodes, seed, epoch
    )
    ids = np.empty(num_samples, np.int64)
    offset = 0
    warn_user = False
    for cn_begin, cn_end in super_spans:
        cn_spans = spans[cn_begin:cn_end]
        cn_span_sizes = np.array([end - begin for begin, end in cn_spans])
        num_cn_samples = cn_span_sizes.sum()
        if num_cn_samples == 0:
            raise ValueError(
                f"a canonical node has no samples: the stream has fewer samples than "
                f"num_canonical_nodes ({num_canonical_nodes})"
            )
        cn_samples = np.empty(num_cn_samples)  # float64, as the library (py1e.py:87)
        inserted = 0
        for begin, end in cn_spans:
            span_samples = np.arange(begin, end)
            epoch_rng.shuffle(span_samples)
            cn_samples[inserted : inserted + (end - begin)] = span_samples
            inserted += end - begin
        cn_sample_offset = 0
        positions = np.arange(num_cn_samples).astype(np.float64)
        for span_size in cn_span_sizes:
            rand_block_size = epoch_rng.integers(int(0.75 * block_size), int(1.25 * block_size))
            cutoff = (rand_block_size - span_size) / 2
            if cutoff < 0:
                cutoff = 0
                warn_user = True
            lower = max(-cutoff, -cn_sample_offset)
            upper = min(cutoff, num_cn_samples - cn_sample_offset - span_size)
            shifts = epoch_rng.uniform(low=lower, high=upper, size=span_size)
            positions[cn_sample_offset : cn_sample_offset + span_size] += shifts
            cn_sample_offset += span_size
        cn_samples = cn_samples[np.argsort(positions)]
        ids[offset : offset + num_cn_samples] = cn_samples
        offset += num_cn_samples
    if warn_user:
        warnings.warn(
            "shuffle_block_size is smaller than some shards: those are not shuffled with others "
            "(as streaming warns)",
            stacklevel=2,
        )
    return ids


def get_shuffle_py2s(
    shard_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int, block_size: int
) -> np.ndarray:
    """py2s: shard samples shuffled once per run and again per epoch (py2s.py:105-146)."""
    ends = np.asarray(shard_sizes, dtype=np.int64).cumsum()
    begins = ends - shard_sizes
    shards = [np.arange(b, e) for b, e in zip(begins, ends, strict=True)]  # _create_shards
    fixed_rng = np.random.default_rng(seed)
    fixed_rng.shuffle(shards)  # a list of arrays: shuffles the order only, as the _Shard list
    for samples in shards:
        fixed_rng.shuffle(samples)
    parts = _partition_py2s(shards, num_canonical_nodes)
    epoch_rng = np.random.default_rng(seed + epoch)
    for part in parts:
        epoch_rng.shuffle(part)
        for samples in part:
            epoch_rng.shuffle(samples)
    flat = [np.concatenate(p) if any(len(x) for x in p) else np.array([], np.int64) for p in parts]
    return np.concatenate(flat)


def _partition_py2s(shards: list[np.ndarray], num_parts: int) -> list[list[np.ndarray]]:
    """py2s's _partition (py2s.py:60-102): cut the shard list at canonical-node boundaries; a cut
    shard's first piece is a view on the same array (the library slices shard.samples too)."""
    total = sum(len(x) for x in shards)
    lists = []
    shard_index = 0
    so_far = 0
    for part in range(num_parts):
        part_end = total * (part + 1) // num_parts
        new_shards = []
        while True:
            if shard_index == len(shards):
                break
            samples = shards[shard_index]
            this = len(samples)
            if part_end < so_far + this:
                if so_far < part_end:
                    split = part_end - so_far
                    new_shards.append(samples[:split])
                    shards[shard_index] = samples[split:]
                    so_far += split
                break
            new_shards.append(samples)
            shard_index += 1
            so_far += this
        lists.append(new_shards)
    return lists


def get_shuffle_naive(
    shard_sizes: np.ndarray, num_canonical_nodes: int, seed: int, epoch: int, block_size: int
) -> np.ndarray:
    """naive: one global permutation per epoch (naive.py:16-40)."""
    rng = np.random.default_rng(seed + epoch)
    return rng.permutation(int(sum(shard_sizes)))


ALGORITHMS: dict[str, Callable[..., np.ndarray]] = {
    "py1br": get_shuffle_py1br,
    "py1e": get_shuffle_py1e,
    "py1s": get_shuffle_py1s,
    "py2s": get_shuffle_py2s,
    "naive": get_shuffle_naive,
}


def get_shuffle(
    algo: str,
    shard_sizes: np.ndarray,
    num_canonical_nodes: int,
    seed: int,
    epoch: int,
    block_size: int = 1 << 18,
) -> np.ndarray:
    """streaming.base.shuffle.get_shuffle (shuffle/__init__.py:23-49)."""
    return ALGORITHMS[algo](shard_sizes, num_canonical_nodes, seed, epoch, block_size)
