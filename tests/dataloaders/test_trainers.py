"""The trainer registry: every trainer answers for itself, and its restart pin is safe to paste.

The loops and spellings are held to the trainers' source in tests/forensics/skip/test_skip.py
(worked examples and randomised runs over every registered trainer). Here: what a new trainer
module must provide, and the pins, run as a shell runs them.
"""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
from pathlib import Path

import pytest

from dataloaders.run_sections import TrainingSpec
from dataloaders.schedule import Schedule
from dataloaders.trainers import (
    MEGATRON_BRIDGE,
    MEGATRON_DEEPSPEED,
    MEGATRON_DEEPSPEED_ARGONNE,
    MEGATRON_LM,
    MEGATRON_LM_PRE_017,
    OLMO_CORE,
    REGISTRY,
    TORCHTITAN,
    TRAINERS,
    get_trainer,
    trainer_help,
)
from forensics.errors import ForensicsError
from forensics.skip.flags import restart_line, write_flag
from forensics_testing.small_run import snapshot


def test_every_trainer_is_listed_once_with_what_tells_it_apart() -> None:
    assert TRAINERS == (
        MEGATRON_LM,
        MEGATRON_LM_PRE_017,
        MEGATRON_DEEPSPEED,
        MEGATRON_DEEPSPEED_ARGONNE,
        OLMO_CORE,
        MEGATRON_BRIDGE,
        TORCHTITAN,
    )
    assert trainer_help() == (
        "The training loop that reads the skip flags: megatron-lm (megatron-core >= 0.17), "
        "megatron-lm-pre-0.17, megatron-deepspeed (BigScience), megatron-deepspeed-argonne, "
        "olmo-core, megatron-bridge (NeMo Megatron-Bridge), torchtitan (0.3.0, no skip option: "
        "rebuild). Default: the config's training.trainer (megatron-lm)."
    )
    for name, trainer in REGISTRY.items():
        assert trainer.name == name and trainer.flag and trainer.semantics
    # only Megatron-LM's rerun state machine reads a tracker file of skips
    assert [t.name for t in REGISTRY.values() if t.reads_tracker] == [
        MEGATRON_LM,
        MEGATRON_LM_PRE_017,
    ]
    with pytest.raises(ForensicsError, match="^unknown trainer 'nemo'; known: megatron-lm, "):
        get_trainer("nemo")


@pytest.mark.parametrize("name", [t.name for t in REGISTRY.values() if not t.no_skip])
def test_a_written_flag_parses_back_and_its_restart_line_pins_first(name: str) -> None:
    """Every trainer, gas 4: iterations 21-22 and 40 skipped on a restart from 20."""
    schedule = Schedule(TrainingSpec(global_batch_size=8, micro_batch_size=2, train_iters=100))
    flag = write_flag(get_trainer(name), [(21, 22), (40, 40)], schedule, 20)
    assert flag.refusal is None and flag.flag
    assert get_trainer(name).parse(flag.flag)  # the trainer's own parser reads it
    line = restart_line(flag)
    want_pin = {
        MEGATRON_LM: "--ckpt-step 20",
        MEGATRON_LM_PRE_017: "--ckpt-step 20",
        MEGATRON_DEEPSPEED_ARGONNE: "--load-tag global_step20",
        MEGATRON_BRIDGE: "checkpoint.ckpt_step=20",  # an override of the recipe's line
    }.get(name)
    if want_pin:  # a pin that is a word of the launch line goes first, in the same line
        assert flag.pin == want_pin and line == f"{want_pin} {flag.flag}"
    else:  # a pin that is not a flag is shown beside the line, never in it
        assert not flag.pin.startswith("--") and line == flag.flag


def test_megatron_deepspeed_explains_its_micro_batch_ranges() -> None:
    """gas 4: two skipped iterations are 8 micro-batches; the range reads 21-28."""
    schedule = Schedule(TrainingSpec(global_batch_size=8, micro_batch_size=2, train_iters=100))
    flag = write_flag(get_trainer(MEGATRON_DEEPSPEED), [(21, 22)], schedule, 20)
    assert flag.flag == "--skip-train-iteration-range 21-28"
    said = get_trainer(MEGATRON_DEEPSPEED).explain(flag.flag, 2)
    assert "the 2 skipped iterations are 8 micro-batches" in said
    assert "lower it by 2" in flag.consequence  # --train-iters: the data runs out earlier
    assert get_trainer(MEGATRON_LM).explain("--iterations-to-skip 21 22", 2) is None


def _deepspeed_checkpoints(load: Path) -> None:
    """A Megatron-DeepSpeed --load folder after the spike: DeepSpeed's tags and `latest`
    (deepspeed/runtime/engine.py:4783, 4840-4841) point at a checkpoint after the rollback."""
    for step in (10, 20):
        (load / f"global_step{step}").mkdir(parents=True)
        (load / f"global_step{step}" / "mp_rank_00_model_states.pt").write_bytes(b"w%d" % step)
    (load / "latest").write_text("global_step20")
    (load / "latest_checkpointed_iteration.txt").write_text("20")


def test_megatron_deepspeed_pin_builds_a_new_load_folder_and_leaves_the_old_one(
    tmp_path: Path,
) -> None:
    """The pin, run by bash as pasted: the live folder is byte-identical afterwards, and the
    new folder makes DeepSpeed (`latest`) and plain Megatron (the tracker file) load 10."""
    load = tmp_path / "ckpt dir"  # a space: the line must quote it
    _deepspeed_checkpoints(load)
    before = snapshot(load)
    pin = get_trainer(MEGATRON_DEEPSPEED).pin(10)
    proc = subprocess.run(
        ["bash", "-c", pin], env=dict(os.environ, LOAD=str(load)), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert snapshot(load) == before
    new = Path(f"{load}.rollback-10")
    assert pin.endswith('then --load "$N" ($LOAD: the job\'s --load folder, left as it is)')
    assert len(get_trainer(MEGATRON_DEEPSPEED).pin(1234567)) < 300  # shown whole in reports
    assert (new / "latest").read_text().strip() == "global_step10"
    assert (new / "latest_checkpointed_iteration.txt").read_text().strip() == "10"
    tag = (new / "latest").read_text().strip()
    assert (new / tag / "mp_rank_00_model_states.pt").read_bytes() == b"w10"
    # run twice, it refuses (mkdir) rather than rewriting a folder it already made
    again = subprocess.run(["bash", "-c", pin], env=dict(os.environ, LOAD=str(load)))
    assert again.returncode != 0 and snapshot(load) == before


def _spelled(source: str) -> set[str]:
    """Every string the code spells: each string constant, the pieces of f-strings, implicit
    concatenations joined (the parser joins them), and each `|`-separated part (a hand-typed
    `auto|megatron|...` help)."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
            out.update(node.value.split("|"))
    return out


def _home(obj: object, *, package: bool = False) -> Path:
    """The file that defines `obj`'s class (its folder with `package`)."""
    path = Path(inspect.getfile(type(obj))).resolve()
    return path.parent if package else path


def test_the_name_check_sees_every_spelling() -> None:
    """What the check below would catch: a plain literal, an f-string piece, a literal split in
    two, a hand-typed help listing."""
    assert "olmo-core" in _spelled('x = "olmo-core"')
    assert "olmo-core" in _spelled('x = f"olmo-core"')
    assert "olmo-core" in _spelled('x = ("olmo" "-core")')
    assert "olmo-core" in _spelled('x = "auto|megatron|olmo-core"')
    assert "olmo-core" not in _spelled("# olmo-core\nx = OLMO_CORE")


def test_every_registered_name_is_spelled_only_in_its_home() -> None:
    """Nothing asks which trainer, loader family, log format or checkpoint kind it has by
    name: each name is spelled where its object is defined (a trainer's module, a family's
    package and its `data:` model, a log format's module, a checkpoint reader's module) and
    every other layer looks the object up in its registry. A name two things share
    (`olmo-core`: a trainer, a family, a log format and a checkpoint kind) may stand in each
    one's home."""
    from dataloaders.families import REGISTRY as FAMILY_REGISTRY
    from forensics.rescore.kinds import REGISTRY as CHECKPOINT_REGISTRY
    from forensics.triage.formats import REGISTRY as FORMAT_REGISTRY
    from forensics_testing.repo_paths import REPO_ROOT

    homes: dict[str, set[Path]] = {}
    for name, trainer in REGISTRY.items():
        homes.setdefault(name, set()).add(_home(trainer))
        # the trainer names the log and checkpoint format it writes; their readers borrow it
        homes.setdefault(trainer.output_format, set()).add(_home(trainer))
    for name, family in FAMILY_REGISTRY.items():
        discriminator = Path(inspect.getfile(family.config_model)).resolve()
        homes.setdefault(name, set()).update({_home(family, package=True), discriminator})
    for registry in (FORMAT_REGISTRY, CHECKPOINT_REGISTRY):
        for name, thing in registry.items():
            homes.setdefault(name, set()).add(_home(thing))
    assert len(homes) >= len(REGISTRY) + len(FAMILY_REGISTRY)

    runtime = [*REPO_ROOT.glob("forensics/**/*.py"), *REPO_ROOT.glob("dataloaders/**/*.py")]
    found, declared = [], set()
    for path in runtime:
        spelled = _spelled(path.read_text())
        for name, allowed in homes.items():
            if name not in spelled:
                continue
            if any(path.resolve() == h or h in path.resolve().parents for h in allowed):
                declared.add(name)
            else:
                found.append(f"{path.relative_to(REPO_ROOT)}: {name!r}")
    assert not found
    assert declared == set(homes)  # every name is spelled in its home (the check is looking)
    # A family's name outside its own package: its `data:` model and at most one other home (a
    # trainer or a log format of the same name), never the readers that borrow it.
    for name, family in FAMILY_REGISTRY.items():
        package = _home(family, package=True)
        outside = {
            path.relative_to(REPO_ROOT)
            for path in runtime
            if package not in path.resolve().parents and name in _spelled(path.read_text())
        }
        assert len(outside) <= 2, (name, sorted(map(str, outside)))
