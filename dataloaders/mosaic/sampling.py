"""How many samples of each stream and shard an epoch draws (proportion / repeat / choose), and
the map from an epoch's resampled ids to the underlying samples. Transcribed from
mosaicml-streaming 0.13.0 (see shuffle.py for why and which commit): Stream.apply_weights
(stream.py:228-294), get_sampling (sampling.py:10-79) and StreamingDataset.resample_streams
(dataset.py:858-937).

Arrays:
    choose_per_stream  int64[streams]  samples each stream contributes to every epoch
    shuffle_units      int64[units]    sizes of the epoch's shard repeats, in shard order: the
                                       "shards" the shuffle permutes (a 2.5x-upsampled shard of 4
                                       samples gives units 4, 4, 2)
    small_per_big      int64[epoch]    resampled ("big") id -> underlying sample id (over all
                                       streams, stream offsets included)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def apply_weights(
    weights: Sequence[tuple[float | None, float | None, int | None]],
    samples_per_stream: np.ndarray,
    choose_per_epoch: int | None,
    seed: int,
) -> np.ndarray:
    """choose_per_stream from each stream's (proportion, repeat, choose) (stream.py:228-294).
    The epoch size is its sum."""
    n = len(weights)
    relative = weights[0][0] is not None
    unspecified = all(w == (None, None, None) for w in weights)
    if relative or (unspecified and choose_per_epoch):
        if relative:
            if not choose_per_epoch:
                choose_per_epoch = int(sum(samples_per_stream))
            proportion = np.array([w[0] for w in weights], np.float64)
        else:
            proportion = samples_per_stream.copy().astype(np.float64)
        proportion /= proportion.sum()
        choose = (choose_per_epoch * proportion).astype(np.int64)
        shortfall = choose_per_epoch - choose.sum()
        rng = np.random.default_rng(seed)
        choose[rng.choice(n, shortfall, False)] += 1
        return choose
    if choose_per_epoch:
        raise ValueError("epoch_size only goes with relative (proportion) weights")
    choose = np.zeros(n, np.int64)
    for k, (_, repeat, chosen) in enumerate(weights):
        if repeat is not None:
            choose[k] = int(repeat * samples_per_stream[k])
        elif chosen is not None:
            choose[k] = chosen
        else:
            choose[k] = samples_per_stream[k]
    return choose


def get_sampling(
    samples_per_shard: np.ndarray,
    choose: int,
    granularity: int,
    seed: int,
    epoch: int,
    use_epoch: bool,
) -> np.ndarray:
    """Samples to draw from each shard of one stream (sampling.py:10-79)."""
    num_samples = int(sum(samples_per_shard))
    if not choose % num_samples:
        return samples_per_shard * choose // num_samples
    num_shards = len(samples_per_shard)
    picks_per_shard = (samples_per_shard + granularity - 1) // granularity
    num_picks = int(sum(picks_per_shard))
    pick_shard_ids = np.repeat(np.arange(num_shards), picks_per_shard)
    samples_per_pick = np.repeat(np.full(num_shards, granularity), picks_per_shard)
    last_pick = np.cumsum(picks_per_shard) - 1
    samples_per_pick[last_pick] = samples_per_shard - (picks_per_shard - 1) * granularity
    rng = np.random.default_rng(seed + epoch if use_epoch else seed)
    pick_ordering = rng.permutation(num_picks)
    choose_per_shard = samples_per_shard * (choose // num_samples)
    choose %= num_samples
    for pick_id in pick_ordering:
        shard_id = pick_shard_ids[pick_id]
        picked = min(choose, int(samples_per_pick[pick_id]))
        choose_per_shard[shard_id] += picked
        choose -= picked
        if not choose:
            break
    return choose_per_shard


def resample_streams(
    samples_per_shard: np.ndarray,
    shards_per_stream: np.ndarray,
    choose_per_stream: np.ndarray,
    *,
    seed: int,
    epoch: int,
    sampling_method: str,
    granularity: int,
    epoch_seed_change: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(shuffle_units, small_per_big) for one epoch (dataset.py:858-937)."""
    rng = np.random.default_rng(seed + epoch if sampling_method == "balanced" else seed)
    sample_offset_per_shard = samples_per_shard.cumsum() - samples_per_shard
    shard_offset_per_stream = shards_per_stream.cumsum() - shards_per_stream
    units: list[list[int]] = []
    ids: list[np.ndarray] = []
    for stream_id in range(len(shards_per_stream)):
        first = int(shard_offset_per_stream[stream_id])
        shard_ids = first + np.arange(int(shards_per_stream[stream_id]))
        sizes = samples_per_shard[shard_ids]
        per_shard = get_sampling(
            sizes, int(choose_per_stream[stream_id]), granularity, seed, epoch, epoch_seed_change
        )
        for shard_id, shard_samples, shard_choose in zip(shard_ids, sizes, per_shard, strict=True):
            shard_samples, shard_choose = int(shard_samples), int(shard_choose)
            full = shard_choose // shard_samples
            shard_units = [shard_samples] * full
            remainder = shard_choose % shard_samples
            if remainder:
                shard_units.append(remainder)
            units.append(shard_units)
            offset = int(sample_offset_per_shard[shard_id])
            if full:
                ids += [offset + np.arange(shard_samples)] * full
            if remainder:
                partial = offset + rng.choice(shard_samples, remainder, False)
                partial.sort()
                ids.append(partial)
    shuffle_units = np.concatenate(units).astype(np.int64)
    small_per_big = np.concatenate(ids).astype(np.int64)
    return shuffle_units, small_per_big
