"""Megatron-Bridge's `train.iterations_to_skip`: the flags we write, run through Bridge's own skip
check, skip exactly the chosen logged iterations.

`BRIDGE_SKIP` is `_should_skip_and_handle_iteration`, verbatim from megatron-bridge 0.6.2
megatron/bridge/training/train.py:1546-1577 (the PyPI wheel; identical at NVIDIA-NeMo/
Megatron-Bridge 6124fbe38a68eea9c4f4be3aa5e084bd5d461d98, branch r0.6.0), pinned by its sha256 and,
where the oracle venv is built (scripts/bridge_oracle_env.sh), compared with the installed file.
It is executed as it is, called by Bridge's loop (train.py:377-426: `while step < train_iters`,
`if _should_skip_and_handle_iteration(...): continue`, then a trained step's `step += 1` and
`consumed_train_samples += batch_size`, 564-571), over the parsed flag; its dummy step draws
`get_num_microbatches()` micro-batches of micro_batch_size x dp samples (1599-1610).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Optional, Union

import pytest

from dataloaders.run_sections import TrainingSpec
from dataloaders.schedule import Schedule
from dataloaders.trainers import MEGATRON_BRIDGE, MEGATRON_LM, LoopStart, get_trainer
from forensics.errors import ForensicsError
from forensics.skip.flags import restart_line, write_flag

BRIDGE_SKIP = r'''def _should_skip_and_handle_iteration(
    global_state: GlobalState,
    train_data_iterator: Optional[Union[RerunDataIterator, list[RerunDataIterator]]],
    pg_collection: ProcessGroupCollection,
) -> bool:
    """Check if the current iteration should be skipped and handle it if so.

    This function checks if the current training step is in the iterations_to_skip list,
    and if so, performs a dummy training step to consume data and update counters.

    Args:
        global_state: Global state containing training state and configuration
        train_data_iterator: Iterator over training data

    Returns:
        bool: True if the iteration was skipped, False otherwise
    """
    cfg = global_state.cfg
    if (global_state.train_state.step + 1) not in cfg.train.iterations_to_skip:
        return False

    # Perform dummy train step to fast forward train_data_iterator
    _dummy_train_step(global_state, train_data_iterator, pg_collection)

    # Update step and sample counters
    global_state.train_state.step += 1
    dp_size = pg_collection.dp.size()
    batch_size = dp_size * cfg.train.micro_batch_size * get_num_microbatches()
    global_state.train_state.consumed_train_samples += batch_size
    global_state.train_state.skipped_train_samples += batch_size

    return True
'''
BRIDGE_SKIP_SHA256 = "3bfc8e76405dc94bd594f3d49bf5782f2c38bd4ce941594056b2f92c85d387e2"
INSTALLED = Path(__file__).resolve().parents[2] / (
    ".venv-bridge/lib/python3.11/site-packages/megatron/bridge/training/train.py"
)
TRAINER = get_trainer(MEGATRON_BRIDGE)


def test_the_skip_check_is_bridges_own() -> None:
    assert hashlib.sha256(BRIDGE_SKIP.encode()).hexdigest() == BRIDGE_SKIP_SHA256
    if INSTALLED.is_file():  # the oracle venv's megatron-bridge 0.6.2
        assert BRIDGE_SKIP in INSTALLED.read_text(encoding="utf-8")


def _bridge_loop(start: int, consumed: int, train_iters: int, skip: list[int], gas: int, unit: int):
    """Bridge's loop over BRIDGE_SKIP; (iteration, first sample, size, trained) per step."""
    draws: list[tuple[int, int, int, bool]] = []
    position = [consumed]

    def _dummy_train_step(global_state, train_data_iterator, pg_collection) -> None:  # noqa: ANN001
        for _ in range(gas):  # 1608-1610: one next() per micro-batch
            position[0] += unit

    names = {
        "GlobalState": object, "Optional": Optional, "Union": Union,
        "RerunDataIterator": object, "ProcessGroupCollection": object,
        "_dummy_train_step": _dummy_train_step, "get_num_microbatches": lambda: gas,
    }  # fmt: skip
    exec(BRIDGE_SKIP, names)
    should_skip = names["_should_skip_and_handle_iteration"]
    state = SimpleNamespace(step=start, consumed_train_samples=consumed, skipped_train_samples=0)
    cfg = SimpleNamespace(train=SimpleNamespace(iterations_to_skip=skip, micro_batch_size=1))
    global_state = SimpleNamespace(train_state=state, cfg=cfg)
    pg = SimpleNamespace(dp=SimpleNamespace(size=lambda: unit))
    while state.step < train_iters:  # train.py:377
        first = position[0]
        if should_skip(global_state, None, pg):  # 426
            draws.append((state.step, first, position[0] - first, False))
            continue
        position[0] += gas * unit  # the step's forward/backward draws its micro-batches
        state.step += 1  # 564
        state.consumed_train_samples += unit * gas  # 570-571
        draws.append((state.step, first, gas * unit, True))
    return draws, state


@pytest.mark.parametrize(
    ("ranges", "checkpoint", "gas"),
    [([(21, 22), (40, 40)], 20, 4), ([(5, 5)], 0, 1), ([(101, 130), (150, 151)], 100, 2)],
)
def test_written_flags_skip_exactly_the_chosen_iterations(ranges, checkpoint, gas) -> None:  # noqa: ANN001
    schedule = Schedule(
        TrainingSpec(global_batch_size=8 * gas, micro_batch_size=8, train_iters=200)
    )
    flag = write_flag(TRAINER, ranges, schedule, checkpoint)
    assert flag.refusal is None
    skip = TRAINER.parse(flag.flag)
    gbs = 8 * gas
    theirs, state = _bridge_loop(checkpoint, checkpoint * gbs, 200, skip, gas, 8)
    start = LoopStart(checkpoint, checkpoint * gbs, 200, 8, gbs, lambda _c: gbs)
    ours = TRAINER.run(start, skip)
    assert [(d.iteration, d.first_sample, d.size, d.trained) for d in ours.draws] == theirs
    chosen = {i for a, b in ranges for i in range(a, b + 1)}
    assert {it for it, _f, _s, trained in theirs if not trained} == chosen
    assert state.skipped_train_samples == len(chosen) * gbs  # train.py:1575
    assert ours.consumed_samples == state.consumed_train_samples  # a skip still counts (1574)
    # the restart line: Bridge's load override first, then the skip override
    assert restart_line(flag) == f"checkpoint.ckpt_step={checkpoint} {flag.flag}"


def test_the_override_is_one_shell_word_and_parses_as_hydra_writes_it() -> None:
    assert TRAINER.spell([(3, 4), (9, 9)], None, 0) == "train.iterations_to_skip=[3,4,9]"  # type: ignore[arg-type]
    assert TRAINER.parse("train.iterations_to_skip=[3, 4,9]") == [3, 4, 9]
    assert TRAINER.parse("++train.iterations_to_skip=[]") == []
    for bad in (
        "train.iterations_to_skip=3",
        "--iterations-to-skip 3",
        "train.iterations_to_skip=[a]",
    ):
        with pytest.raises(ForensicsError):
            TRAINER.parse(bad)


def test_example_config_is_valid() -> None:
    from dataloaders.run_config import load_config
    from forensics_testing.repo_paths import REPO_ROOT

    config = load_config(REPO_ROOT / "configs" / "example-megatron-bridge.yaml")
    assert config.training.trainer == MEGATRON_BRIDGE
    assert [s.start_iteration for s in config.data.data_stages] == [1, 40001]


SITE = Path(__file__).resolve().parents[2] / ".venv-bridge/lib/python3.11/site-packages"
# The line that names a checkpoint folder: Megatron-LM's get_checkpoint_name (the megatron-core
# 0.19.2 wheel's megatron/training/checkpointing.py:211) and Bridge's (megatron-bridge 0.6.2
# megatron/bridge/training/utils/checkpoint_utils.py:107), each verbatim.
CHECKPOINT_NAMES = {
    MEGATRON_LM: (
        "megatron/training/checkpointing.py",
        "directory = 'iter_{:07d}'.format(iteration)",
    ),
    MEGATRON_BRIDGE: (
        "megatron/bridge/training/utils/checkpoint_utils.py",
        'directory = "iter_{:07d}".format(iteration)',
    ),
}


@pytest.mark.parametrize("name", sorted(CHECKPOINT_NAMES))
def test_checkpoint_folders_are_named_as_the_trainer_names_them(name: str, tmp_path: Path) -> None:
    """Megatron-LM and Bridge save the checkpoint after iteration N in `iter_{N:07d}` (eight
    digits past 9,999,999); the trainer lists exactly those folders of a save folder, not the
    tracker files beside them."""
    trainer = get_trainer(name)
    source, line = CHECKPOINT_NAMES[name]
    if (SITE / source).is_file():  # the oracle venv's installed source
        assert line in (SITE / source).read_text(encoding="utf-8")
    pattern = line.split("=", 1)[1].strip()[1:].split(".format")[0][:-1]  # iter_{:07d}
    for iteration in (0, 500, 12_345_678):
        assert trainer.checkpoint_name(iteration) == pattern.format(iteration)
        (tmp_path / trainer.checkpoint_name(iteration)).mkdir()
        # Bridge writes it when the save finalizes (megatron/bridge/training/checkpointing.py
        # :1430-1496); Megatron-LM's folder is its checkpoint
        (tmp_path / trainer.checkpoint_name(iteration) / "train_state.pt").write_bytes(b"")
    (tmp_path / "iter_0000900").mkdir()  # a save still in progress (no train_state.pt yet)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("12345678")
    (tmp_path / "latest_train_state.pt").write_bytes(b"")
    unfinished = [900] if name == MEGATRON_LM else []
    assert trainer.checkpoints(tmp_path) == sorted([0, 500, 12_345_678, *unfinished])
