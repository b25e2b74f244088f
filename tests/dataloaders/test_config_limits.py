"""A run config is read with bounds: an alias bomb is refused from its few distinct nodes, before
anything expands it, and a giant file before parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataloaders import run_config
from dataloaders.run_config import load_config
from forensics.errors import ForensicsError

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]\n" for a, b in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_alias_bomb_is_refused_before_it_is_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """About 9**10 values once expanded, a few dozen nodes as written: the size check visits each
    distinct node once (every scalar is looked at for octal once) and nothing builds the
    document."""
    import yaml

    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    scalars_seen: list[str] = []
    check_octal = run_config._refuse_octal
    monkeypatch.setattr(
        run_config,
        "_refuse_octal",
        lambda node, p: (scalars_seen.append(node.value), check_octal(node, p)),
    )

    def never_built(self, node):
        raise AssertionError("the bomb was constructed")

    monkeypatch.setattr(yaml.SafeLoader, "construct_document", never_built)
    with pytest.raises(ForensicsError, match="aliases expand to more than 100,000 values"):
        load_config(path)
    # Keys a..f and the 9 x's of `a`, each once: f's value (597,871 values) crosses the bound so
    # g..i are never read, and the aliases under b..f count their anchors' weights, not walked.
    assert scalars_seen == ["a", *["x"] * 9, "b", "c", "d", "e", "f"]


def test_giant_config_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("".join(f"key{i}: {i}\n" for i in range(200_000)))
    with pytest.raises(ForensicsError, match="is not a run config"):
        load_config(path)


def test_a_few_aliases_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(
        "data:\n  format: megatron\n  seq_length: 8\n  blend: &b [{prefix: x}]\n"
        "training: {global_batch_size: 8, train_iters: 10}\n"
    )
    assert load_config(path).data.blend[0].prefix.name == "x"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"seed": True}, "seed: expected a number, got True"),
        ({"seed": "7"}, "seed: expected a number, got '7'"),
        ({"split": "-98,2,0"}, "split must be like"),
    ],
)
def test_values_are_not_coerced(tmp_path: Path, data: dict, message: str) -> None:
    from dataloaders.run_config import config_from_dict

    raw = {
        "data": {"format": "megatron", "seq_length": 8, "blend": [{"prefix": "x"}], **data},
        "training": {"global_batch_size": 8, "train_iters": 10},
    }
    with pytest.raises(ForensicsError, match=message):
        config_from_dict(raw, base_dir=tmp_path, source=None)


def test_a_stage_after_the_end_of_training_is_refused() -> None:
    from dataloaders.run_sections import TrainingSpec
    from dataloaders.schedule import Schedule

    with pytest.raises(ForensicsError, match="after the end of training"):
        Schedule(TrainingSpec(global_batch_size=8, train_iters=100), [1, 150])


@pytest.mark.parametrize(
    ("blend", "message"),
    [
        ([{"prefix": "x", "name": "a"}, {"prefix": "y", "name": "a"}], "must be unique"),
        ([{"prefix": "x", "weight": float("inf")}], "finite number"),
    ],
)
def test_blend_mistakes_are_one_line_errors(tmp_path: Path, blend: list, message: str) -> None:
    from dataloaders.run_config import config_from_dict

    raw = {
        "data": {"format": "megatron", "seq_length": 8, "blend": blend},
        "training": {"global_batch_size": 8, "train_iters": 10},
    }
    with pytest.raises(ForensicsError, match=message):
        config_from_dict(raw, base_dir=tmp_path, source=None)


def test_an_internal_error_is_one_line_and_a_saved_traceback(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import functools, sys, forensics.cli as c\n"
        "command = c.app.registered_commands[0]\n"
        "@functools.wraps(command.callback)\n"
        "def boom(*a, **k): raise RuntimeError('kaboom')\n"
        "command.callback = boom\n"
        "sys.argv = ['forensics', 'triage', 'log', '--out', 'x']\n"
        "c.main()\n"
    )
    env = {"PATH": "", "TMPDIR": str(tmp_path), "COLUMNS": "300"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 3 and "Traceback" not in proc.stderr
    assert "internal error: RuntimeError: kaboom" in proc.stderr
    (saved,) = (tmp_path / "forensics-crashes").glob("crash-*.log")
    assert "RuntimeError: kaboom" in saved.read_text() and "Traceback" in saved.read_text()
