"""The replay in parts by iteration range (forensics.spike.census): in this process, on a local
process pool and on Ray, the file it writes holds the table one in-process replay of each side
gives, row for row."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import forensics.spike.census as census
from dataloaders.run_config import load_config
from forensics.replay import open_replayer, replay_sides
from forensics_testing.small_run import SMALL, WINDOW

SIDES = {
    "window": (SMALL.spike_iteration - WINDOW + 1, SMALL.spike_iteration),  # crosses the switch
    "baseline": (60, 60 + WINDOW - 1),
}


@pytest.fixture(scope="module")
def reference(small_run: Path) -> pl.DataFrame:
    replayer = open_replayer(load_config(small_run / "forensics.yaml"))
    return replay_sides(replayer, SIDES, progress=False)


@pytest.mark.parametrize("engine,workers", [("local", 1), ("local", 2), ("ray", 2)])
def test_census_in_parts_equals_one_replay(
    small_run: Path,
    reference: pl.DataFrame,
    engine: str,
    workers: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setattr(census, "PART_SAMPLES", 3 * SMALL.global_batch_size)  # 3 iterations
    address = None
    if engine == "ray":
        address = request.getfixturevalue("ray_head")
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    config = load_config(small_run / "forensics.yaml")
    replayer = open_replayer(config)
    path = tmp_path / "replay.parquet"
    items = census.plan_census(replayer, SIDES, tmp_path / "parts")
    assert len(items) == 2 * -(-WINDOW // 3)  # both sides, three iterations a part
    census.census_file(replayer, config, SIDES, path, engine=engine, workers=workers,
                       address=address)  # fmt: skip
    assert pl.read_parquet(path).equals(reference)
    assert not (tmp_path / "replay.parts").exists(), "the parts are merged and removed"


def test_a_part_written_by_an_earlier_attempt_is_kept(
    small_run: Path, reference: pl.DataFrame, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupted census resumes: a part already on disk is not replayed again."""
    monkeypatch.setattr(census, "PART_SAMPLES", 10 * SMALL.global_batch_size)
    config = load_config(small_run / "forensics.yaml")
    replayer = open_replayer(config)
    folder = tmp_path / "replay.parts"
    folder.mkdir()
    first = census.plan_census(replayer, SIDES, folder)[0]
    census.replay_part(replayer, first)
    calls: list[tuple[int, int]] = []
    original = type(replayer).replay

    def counting(self, a: int, b: int, **kwargs):
        calls.append((a, b))
        return original(self, a, b, **kwargs)

    monkeypatch.setattr(type(replayer), "replay", counting)
    census.census_file(replayer, config, SIDES, tmp_path / "replay.parquet")
    assert (first["first"], first["last"]) not in calls and calls
    assert pl.read_parquet(tmp_path / "replay.parquet").equals(reference)


def test_a_damaged_stage_file_is_written_again(tmp_path: Path) -> None:
    """`cached_file` (the census's cache): a file an earlier run wrote is read back; a damaged
    one is written again, never trusted."""
    from forensics.pipeline import cached_file

    path, hits = tmp_path / "replay-x.parquet", {}
    table = pl.DataFrame({"iteration": [1, 2]})
    writes: list[Path] = []

    def write(target: Path) -> None:
        writes.append(target)
        table.write_parquet(target)

    assert cached_file(path, write, hits, "replay").equals(table) and hits["replay"] is False
    assert cached_file(path, write, hits, "replay").equals(table) and hits["replay"] is True
    path.write_bytes(b"not parquet")
    assert cached_file(path, write, hits, "replay").equals(table) and hits["replay"] is False
    assert writes == [path, path]
