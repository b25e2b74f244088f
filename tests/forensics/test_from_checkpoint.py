"""`--from-checkpoint DIR`: the dispatcher asks every family of the registry whether the folder is
its save folder (`Family.recognises_save`) and lets that one read it (`Family.saved_run`).

Each family's reading is tested against its trainer's own files beside its package
(tests/dataloaders/megatron/test_saved_run.py, test_bridge_save.py,
tests/dataloaders/olmo_core/test_olmo_core_trainer_run.py); here, that the dispatcher names no
framework: a family added to the registry reads its folder through the hook alone, and a folder
no family or two families claim is refused in one line.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dataloaders.families import REGISTRY
from dataloaders.family_base import ConfigFromDict, Family, RestartFile
from forensics.errors import ForensicsError
from forensics.from_checkpoint import config_from_checkpoint, holds_checkpoint

# A run config the stand-in readers return: the dispatcher only passes it on.
RAW = {
    "data": {"format": "megatron", "seq_length": 8, "seed": 7, "blend": [{"prefix": "/d/x"}]},
    "training": {"global_batch_size": 2, "train_iters": 10},
}


class ThrowawayFamily(Family):
    """A family that exists only in this test: its trainer leaves `throwaway.json`."""

    name: ClassVar[str] = "throwaway"
    config_model: ClassVar[type] = dict
    restart = RestartFile("restart.flags", "nothing", True)
    save_files = "throwaway.json"

    def __init__(self) -> None:
        self.read: list[tuple[Path, int | None]] = []

    def open(self, config: Any) -> Any:
        raise AssertionError("never opened here")

    def recognises_save(self, folder: Path) -> bool:
        return (folder / "throwaway.json").is_file()

    def saved_run(
        self,
        folder: Path,
        step: int | None,
        say: Callable[[str], None],
        config_from_dict: ConfigFromDict,
    ) -> Any:
        self.read.append((folder, step))
        say(f"read {folder / 'throwaway.json'}")
        return config_from_dict(RAW, base_dir=Path.cwd(), source=None)


@pytest.fixture
def throwaway(monkeypatch: pytest.MonkeyPatch) -> ThrowawayFamily:
    family = ThrowawayFamily()
    monkeypatch.setitem(REGISTRY, family.name, family)
    return family


def test_a_family_added_to_the_registry_reads_its_folder_through_the_hook(
    throwaway: ThrowawayFamily, tmp_path: Path
) -> None:
    save = tmp_path / "save"
    save.mkdir()
    assert not holds_checkpoint(save)  # before the trainer's first save
    (save / "throwaway.json").write_text("{}")
    assert holds_checkpoint(save)
    lines: list[str] = []
    config = config_from_checkpoint(save, 40, lines.append)
    assert throwaway.read == [(save, 40)]
    assert lines == [f"read {save / 'throwaway.json'}"]
    assert config.origin == f"--from-checkpoint {save}" and config.data.seed == 7


def test_a_folder_no_family_or_two_families_claim_is_refused(
    throwaway: ThrowawayFamily, tmp_path: Path
) -> None:
    def refused(folder: Path, *needles: str) -> None:
        with pytest.raises(ForensicsError) as err:
            config_from_checkpoint(folder, None, lambda _line: None)
        assert "\n" not in str(err.value)
        for needle in needles:
            assert needle in str(err.value), str(err.value)

    refused(tmp_path / "nowhere", "--from-checkpoint directory not found")
    refused(
        tmp_path,
        "no checkpoint forensics can read in it",
        "megatron: iter_NNNNNNN/",
        "olmo-core: stepN/config.json",
        "throwaway: throwaway.json",
    )
    (tmp_path / "throwaway.json").write_text("{}")
    (tmp_path / "step0").mkdir()
    (tmp_path / "step0" / "config.json").write_text("{}")
    refused(tmp_path, "holds the save files of olmo-core and throwaway at once")
    assert throwaway.read == []


def test_olmo_core_save_folder_goes_to_its_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder with stepN/config.json (where OLMo-core's ConfigSaverCallback writes it), or a
    stepN folder itself, is read by the OLMo-core family; the run itself is checked against the
    library's own save folders in tests/dataloaders/olmo_core/test_olmo_core_trainer_run.py."""
    from dataloaders.olmo_core import saved_config

    seen: list[Path] = []
    monkeypatch.setattr(
        saved_config, "run_config_from_save_folder", lambda folder: seen.append(folder) or RAW
    )
    (tmp_path / "step0").mkdir()
    (tmp_path / "step0" / "config.json").write_text("{}")
    config = config_from_checkpoint(tmp_path, None, lambda _line: None)
    assert seen == [tmp_path] and config.data.seed == 7
    config_from_checkpoint(tmp_path / "step0", None, lambda _line: None)
    assert seen == [tmp_path, tmp_path / "step0"]


def test_triage_suggests_the_save_directory() -> None:
    """triage --from-checkpoint DIR: the suggested spike command reads the run from DIR."""
    from forensics.triage.config import RunInfo
    from forensics.triage.plan import next_command

    cmd, why = next_command(3000, 2940, RunInfo(from_checkpoint="/ckpt/my run"))
    assert cmd.startswith("forensics spike --from-checkpoint '/ckpt/my run' --step 3000 ")
    assert why is None or "replace" not in why
    cmd, _why = next_command(3000, 2940, RunInfo(config_path="a.yaml", from_checkpoint="/c"))
    assert cmd.startswith("forensics spike --config a.yaml ")
