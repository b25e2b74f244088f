"""The whole run's order: which sample of which rank's source stream every (iteration, position)
took, from the first step or from each resumed loader state.

Global batch convention: step i takes `accumulation` batches of `local_batch_size` samples from
every rank's loader (torchtitan/trainer.py:885-889); rank r's j-th sample of the step sits at
position r * accumulation * local_batch_size + j, and sample_index = (i - 1) * global batch +
position. A finite loader's last batch may be short (the DataLoader keeps it), and a step that
cannot take all its batches is not trained (trainer.py:677-683, "that entire step will not be
executed"), so the run ends at the last step every rank completes.

A resume from step-N restarts every rank's loader from its saved state (a fresh
`InterleavedDataset.__iter__`: the exhausted flags start over, interleaved.py:111-113), so the
samples after N are drawn from the streams positioned where the state says. The state is
checked against the documents: its buffered tokens must be the tail of the documents it says
were read, or the replay refuses (another tokenizer, other files, another split).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from dataloaders.errors import ForensicsError
from dataloaders.torchtitan.sources import RankOrder, Source
from dataloaders.torchtitan.state import RankState, SourceState
from dataloaders.torchtitan.streams import Cursor, PackedStream, interleave, single_source
from dataloaders.torchtitan.tokens import TitanTokenizer

KEY_SHIFT = 40  # sample key = stream << KEY_SHIFT | k


@dataclass
class Start:
    """Where a rank's loader starts a phase: per source (stream base, cursor), and the RNG."""

    bases: list[int]
    cursors: list[Cursor]
    rng_state: tuple | None


class Planner:
    """Builds the run's steps table and its packed streams (plan.py's module docstring)."""

    def __init__(self, data: Any, sources: list[Source], tokenizer: TitanTokenizer, gbs: int):
        self.data = data
        self.sources = sources
        self.tokenizer = tokenizer
        self.seq = data.seq_len
        self.accum = data.accumulation(gbs)
        self.per_step = data.local_batch_size * self.accum
        self.inputs = [s.token_inputs(tokenizer) for s in sources]
        self.orders = {
            (s, r): RankOrder(src, r, data.dp_world_size)
            for s, src in enumerate(sources)
            for r in range(data.dp_world_size)
        }
        self.streams: list[tuple[int, PackedStream]] = []  # (source, stream)
        weights = [s.spec.weight for s in sources]
        self.probs = [w / sum(weights) for w in weights]

    def _stream(self, source: int, rank: int, base: int, tokens_needed: int) -> PackedStream:
        """Enough epochs of the rank's documents to hold `tokens_needed` tokens past `base`."""
        rank_order = self.orders[(source, rank)]
        docs, ends, total = [], [], 0
        looping = self.data.infinite or self.data.stopping_strategy == "all_exhausted"
        e = 0
        while True:
            epoch = rank_order.epoch(e)
            docs.append(epoch)
            total += int(self.inputs[source][epoch].sum())
            ends.append(total)
            if total >= base + tokens_needed or not looping:
                break
            if total == 0:
                name = self.sources[source].name
                raise ForensicsError(
                    f"source {name} gives DP rank {rank} no tokens: torchtitan would loop over "
                    "it forever"
                )
            e += 1
        order = np.concatenate(docs)
        return PackedStream(
            order, self.inputs[source][order], np.asarray(ends, dtype=np.int64), base, self.seq
        )

    def _draw(self, rank: int, start: Start, n: int) -> tuple[list[int], list[int]]:
        """(stream index, k) of the rank's next up to n samples from `start`."""
        tokens = (n + 1) * self.seq
        ids = []
        for s, base in enumerate(start.bases):
            self.streams.append((s, self._stream(s, rank, base, tokens)))
            ids.append(len(self.streams) - 1)
        infinite = self.data.infinite
        if not self.data.interleaved:
            ks = single_source(self.streams[ids[0]][1], start.cursors[0], n, infinite)
            return [ids[0]] * len(ks), ks.tolist()
        picks, _rng = interleave(
            [self.streams[i][1] for i in ids],
            start.cursors,
            self.probs,
            start.rng_state,
            self.data.seed,
            n,
            infinite=infinite,
            all_exhausted=self.data.stopping_strategy == "all_exhausted",
        )
        return [ids[s] for s, _k in picks], [k for _s, k in picks]

    def fresh(self) -> Start:
        n = len(self.sources)
        return Start([0] * n, [Cursor(0, 0) for _ in range(n)], None)

    def resumed(self, states: list[RankState], where: str) -> list[Start]:
        """Every rank's start as its saved state describes it; the saved token buffers are
        checked against the documents (all ranks' documents tokenized at once)."""
        starts, checks = [], []
        for rank, state in enumerate(states):
            here = f"{where}: dp_rank_{rank}"
            if len(state.sources) != len(self.sources):
                raise ForensicsError(
                    f"{here}: the saved loader has {len(state.sources)} sources, the config "
                    f"{len(self.sources)}"
                )
            if (state.rng_state is None) == self.data.interleaved:
                kind = "an interleaved" if state.rng_state is not None else "a single-source"
                raise ForensicsError(f"{here}: the saved state is {kind} loader's; "
                                     "data.interleaved says otherwise")  # fmt: skip
            bases, cursors = [], []
            for s, saved in enumerate(state.sources):
                named = f"{here} source {self.sources[s].name}"
                epoch, pos = self._position(s, rank, saved, named)
                tail_docs, end = self._tail(s, rank, epoch, pos, len(saved.inputs_buffer))
                checks.append((s, tail_docs, saved.inputs_buffer, named))
                bases.append(end - len(saved.inputs_buffer))
                cursors.append(Cursor(0, epoch))
            starts.append(Start(bases, cursors, state.rng_state))
        self._check_buffers(checks)
        return starts

    def _position(self, s: int, rank: int, saved: SourceState, where: str) -> tuple[int, int]:
        """(epoch, documents of it read) of a saved source state on `rank`."""
        rank_order = self.orders[(s, rank)]
        if saved.data is not None:
            if not self.sources[s].spec.streaming:
                raise ForensicsError(f"{where}: a streaming state for a map-style source")
            return rank_order.streaming_position(saved.data, where)
        if self.sources[s].spec.streaming:
            raise ForensicsError(f"{where}: a map-style state for a streaming source")
        assert saved.epoch is not None and saved.sample_idx is not None
        n_docs = len(rank_order.epoch(saved.epoch))
        if saved.sample_idx > n_docs:
            raise ForensicsError(
                f"{where}: sample_idx {saved.sample_idx} is past the rank's {n_docs} documents"
            )
        return saved.epoch, saved.sample_idx

    def _tail(self, s: int, rank: int, epoch: int, pos: int, n: int) -> tuple[list[int], int]:
        """(the documents, oldest first, whose input tokens end the stream before position
        `pos` of `epoch` and cover its last n tokens; the stream token offset there)."""
        rank_order = self.orders[(s, rank)]
        inputs = self.inputs[s]
        end = sum(int(inputs[rank_order.epoch(e)].sum()) for e in range(epoch))
        end += int(inputs[rank_order.epoch(epoch)[:pos]].sum())
        docs: list[int] = []
        covered, e, p = 0, epoch, pos
        while covered < n and (e > 0 or p > 0):
            if p == 0:
                e, p = e - 1, len(rank_order.epoch(e - 1))
                continue
            doc = int(rank_order.epoch(e)[p - 1])
            docs.insert(0, doc)
            covered += int(inputs[doc])
            p -= 1
        return docs, end

    def _check_buffers(self, checks: list[tuple[int, list[int], list[int], str]]) -> None:
        """Each saved buffer must be the last input tokens of the documents read before it
        (tokens[:-1] of each, text_datasets.py:142)."""
        for s in {c[0] for c in checks}:
            wanted = np.array(sorted({d for c in checks if c[0] == s for d in c[1]}), np.int64)
            ids = self.sources[s].doc_tokens(wanted, self.tokenizer) if len(wanted) else {}
            for _s, docs, buffer, where in (c for c in checks if c[0] == s):
                tail = [t for d in docs for t in ids[d][:-1]]
                if (tail[len(tail) - len(buffer) :] if buffer else []) != list(buffer):
                    raise ForensicsError(
                        f"{where}: the saved token buffer ({len(buffer)} tokens) is not the tail "
                        "of the documents the state says were read: the tokenizer, the files or "
                        "the split differ from the run's"
                    )

    def rank_steps(self, rank: int, start: Start, n_steps: int) -> pl.DataFrame:
        """Rows (step, position, key) of the rank's next up to n_steps complete steps."""
        stream_ids, ks = self._draw(rank, start, n_steps * self.per_step)
        batches = -(-len(ks) // self.data.local_batch_size)  # the last one may be short
        keep = min(len(ks), (batches // self.accum) * self.per_step)
        j = np.arange(keep, dtype=np.int64)
        key = (np.asarray(stream_ids[:keep], dtype=np.int64) << KEY_SHIFT) | np.asarray(
            ks[:keep], dtype=np.int64
        )
        return pl.DataFrame(
            {
                "step": j // self.per_step,
                "position": (rank * self.per_step + j % self.per_step).astype(np.int32),
                "key": key,
            }
        )
