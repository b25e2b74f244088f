"""Shared test fixtures.

`megatron` imports megatron-core (the oracle for exact replay) once per session with its
harmless Transformer Engine / Apex warnings silenced; tests that need it take the fixture.
`shared_dir` is the read-only material beside the checkout (skips when absent).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

# the moto S3 server and bucket fixtures of the remote-data tests (tests/dataloaders/storage/)
pytest_plugins = ("forensics_testing.s3_fixtures",)

SHARED = Path(__file__).resolve().parents[2] / "shared"
ROOT = Path(__file__).resolve().parents[1]


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


class OracleTokenizer:
    """The little a megatron-core GPTDatasetConfig needs from a tokenizer."""

    def __init__(self, vocab_size: int = 65000) -> None:
        self.vocab_size = vocab_size
        self.eod = 0
        self.pad = vocab_size - 1
        self.unique_identifiers = {"class": "OracleTokenizer", "vocab_size": vocab_size}


@pytest.fixture(scope="session")
def megatron_build(megatron, tmp_path_factory):
    """Build train/valid/test datasets with megatron-core itself (the oracle).

    Returns a function (prefixes, weights, sizes, **config) -> [train, valid, test]. A one-rank
    gloo group is initialised once, because BlendedDataset calls torch.distributed.get_rank()
    unguarded when it writes its cache.
    """
    import torch.distributed as dist

    if not dist.is_initialized():
        store = tmp_path_factory.mktemp("gloo") / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)

    def build(
        prefixes: list[str],
        weights: list[float] | None,
        sizes: list[int | None],
        *,
        seed: int = 1234,
        seq_length: int = 64,
        split: str = "90,8,2",
        cache: Path | None = None,
        extra: bool = True,
        surplus: float = 0.005,
    ) -> list:
        config = megatron.gpt.GPTDatasetConfig(
            random_seed=seed,
            sequence_length=seq_length,
            blend=([str(p) for p in prefixes], weights),
            split=split,
            path_to_cache=str(cache) if cache is not None else None,
            reset_position_ids=False,
            reset_attention_mask=False,
            eod_mask_loss=False,
            tokenizer=OracleTokenizer(),
            add_extra_token_to_sequence=extra,
            mid_level_dataset_surplus=surplus,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return megatron.builder.BlendedMegatronDatasetBuilder(
                megatron.gpt.GPTDataset, sizes, lambda: True, config
            ).build()

    return build


@pytest.fixture(autouse=True)
def _private_forensics_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own index cache, so no test reads another's (or the user's) cache."""
    folder = tmp_path / "forensics-cache"
    monkeypatch.setenv("FORENSICS_CACHE", str(folder))
    return folder


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for a Ray head, or to prove an
    unreachable address is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A Ray head on 127.0.0.1 started by this test (its own process group, ended by us).

    Token authentication is off for this throwaway head: it listens on 127.0.0.1 only, and the
    shared ~/.ray/auth_token is then neither read nor written."""
    pytest.importorskip("ray")
    port = free_port()
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    ray_bin = Path(sys.executable).with_name("ray")
    proc = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            "--num-cpus=3",
            f"--temp-dir={temp}",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={
            **os.environ,
            "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
            "RAY_AUTH_MODE": "disabled",
        },
    )
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("the Ray head did not come up in 90 s")
        time.sleep(2)  # the GCS port opens before the raylet registers
        yield f"127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of our group is still there
        except ProcessLookupError:
            pass
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small generated run with a complete spike output in `spike/`
    (forensics_testing/small_run.py);
    shared: copy it (small_run.copy_run) before changing anything."""
    from forensics_testing.small_run import build_small_run

    cache = tmp_path_factory.mktemp("small-cache")
    old = os.environ.get("FORENSICS_CACHE")
    os.environ["FORENSICS_CACHE"] = str(cache)
    try:
        return build_small_run(tmp_path_factory.mktemp("small"))
    finally:
        if old is None:
            os.environ.pop("FORENSICS_CACHE", None)
        else:
            os.environ["FORENSICS_CACHE"] = old


# -- markers (registered in pyproject.toml) -------------------------------------------------


def oracle_reason(item: pytest.Item, use=None) -> str | None:
    """Why a test needs a real library beside the tool, or None: forensics_testing/oracle_use.py
    reads the test, its fixtures and the helpers they reach (megatron-core through the `megatron`
    fixtures, the oracle venvs' runners, tests/oracles/, a torch model trained for the test,
    Chromium)."""
    from forensics_testing.oracle_use import OracleUse

    use = use or _ORACLE_USE.setdefault("use", OracleUse())
    functions = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in getattr(info, "name2fixturedefs", {}).values():
        functions += [d.func for d in defs]
    return next((r for f in functions if f is not None and (r := use.of_function(f))), None)


_ORACLE_USE: dict = {}


def _marks_for(item: pytest.Item) -> list[str]:
    """The markers a test earns from what it uses: a fixture, a parameter, a skip condition,
    or code (its own, its fixtures', the helpers they call) that runs a real library."""
    marks = []
    fixtures = set(getattr(item, "fixturenames", ()))
    if oracle_reason(item):
        marks.append("oracle")
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "ray_head" in fixtures or params.get("engine") == "ray":
        marks.append("ray")
    reasons = " ".join(str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif"))
    if "chromium" in reasons:
        marks.append("browser")
    return marks


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for name in _marks_for(item):
            item.add_marker(getattr(pytest.mark, name))
