"""numpy's legacy `RandomState.shuffle` of a 1-D array, compiled, with the same result and state.

Megatron shuffles its document index (E epochs x D documents, tens of millions of entries) and its
sample index with `numpy.random.RandomState.shuffle`. numpy runs that as one Fisher-Yates loop that
holds the GIL and pays three `memcpy` calls and an indirect generator call per element
(numpy/numpy 1f90bbb5, numpy/random/mtrand.pyx:4622-4642 and 4685-4692):

    for i in reversed(range(1, n)):
        j = random_interval(&bitgen, i)          # distributions.c:1085-1110
        swap(data[i], data[j])

`random_interval(max)` draws 32-bit words from MT19937 (max <= 0xffffffff) and keeps the first one
whose bits under the smallest all-ones mask >= max are <= max. The words do not depend on the
array, only on the generator, so they are drawn in bulk by numpy's own generator
(`randint(0, 2**32, dtype=uint32)` takes exactly one `next_uint32` per value: numpy
`_bounded_integers.pyx` `_rand_uint32`, rng == 0xFFFFFFFF) and turned into the swap partners
`j` by a compiled loop that touches no array data; a second compiled loop does the swaps, a tight
loop whose random reads overlap in the memory system. Both release the GIL, so the shuffles of
different datasets run in parallel threads.

The generator's state after the shuffle is exact, because no word is drawn that the shuffle
would not draw: each step takes at least one word, so a batch of as many words as steps remain is
never too many; batches are drawn until every step has its partner.
"""

from __future__ import annotations

import numpy as np

from dataloaders.lazy_jit import have_numba, kernel


def _partners(words: np.ndarray, i: int, out: np.ndarray, done: int) -> tuple[int, int]:
    """Swap partners for steps i, i-1, ... from `words` into out[done:]; returns (i, done) next.

    A step whose words run out inside its rejection loop is left for the next batch: its
    rejected words were drawn, as the C loop would have drawn them.
    """
    w = 0
    n_words = words.shape[0]
    value = 0
    while i >= 1:
        mask = i
        mask |= mask >> 1
        mask |= mask >> 2
        mask |= mask >> 4
        mask |= mask >> 8
        mask |= mask >> 16
        accepted = False
        while w < n_words:
            value = int(words[w]) & mask
            w += 1
            if value <= i:
                accepted = True
                break
        if not accepted:
            return i, done
        out[done] = value
        done += 1
        i -= 1
    return i, done


def _swap_all(data: np.ndarray, partners: np.ndarray) -> None:
    """Step k swaps data[n-1-k] with data[partners[k]], in the order Fisher-Yates does."""
    last = data.shape[0] - 1
    for k in range(partners.shape[0]):
        i = last - k
        j = partners[k]
        tmp = data[i]
        data[i] = data[j]
        data[j] = tmp


# numba compiles the loops (on first use); without it numpy's own shuffle runs (exact, slower).
if have_numba():
    _partners = kernel(cache=True, nogil=True)(_partners)
    _swap_all = kernel(cache=True, nogil=True)(_swap_all)


def legacy_shuffle(rng: np.random.RandomState, data: np.ndarray) -> None:
    """`rng.shuffle(data)` for a 1-D array, in place: same permutation, same state after."""
    n = int(data.shape[0])
    if not have_numba() or data.ndim != 1 or n < 2 or n - 1 > 0xFFFFFFFF:
        rng.shuffle(data)  # 64-bit draws (over 2**32 entries) take numpy's own path
        return
    partners = np.empty(n - 1, dtype=np.int64 if n > np.iinfo(np.int32).max else np.int32)
    i, done = n - 1, 0
    while i >= 1:
        words = rng.randint(0, 2**32, size=i, dtype=np.uint32)
        i, done = _partners(words, i, partners, done)
    _swap_all(data, partners)
