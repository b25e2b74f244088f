"""Shared test fixtures.

`megatron` imports megatron-core (the oracle for exact replay) once per session with its
harmless Transformer Engine / Apex warnings silenced; tests that need it take the fixture.
`shared_dir` is the read-only material beside the checkout (skips when absent).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """/work/shared (beside the checkout); skip when this checkout has none."""
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} not present")
    return SHARED


@pytest.fixture(scope="session")
def megatron() -> SimpleNamespace:
    """megatron-core's dataset modules (imports torch: only tests and benchmarks use it)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import (
            blended_dataset,
            blended_megatron_dataset_builder,
            gpt_dataset,
            indexed_dataset,
        )
    return SimpleNamespace(
        indexed=indexed_dataset,
        gpt=gpt_dataset,
        blended=blended_dataset,
        builder=blended_megatron_dataset_builder,
    )


def random_documents(
    rng: np.random.Generator, count: int, vocab: int, min_len: int = 1, max_len: int = 200
) -> list[np.ndarray]:
    """`count` documents of random tokens in [0, vocab), lengths in [min_len, max_len]."""
    lengths = rng.integers(min_len, max_len + 1, size=count)
    return [rng.integers(0, vocab, size=int(n)) for n in lengths]
