"""The accident battery's refusals: inputs a real user has that were misread without a word.
Each case asserts the one-line message (forensics_testing/refusal.py): control characters in config
names,
Megatron arguments that change the order and are not replayed, a long --checkpoints list, detector
thresholds that never fire, a FIFO or pipe as the log, deeply nested JSON, YAML that reads other
than it looks, an output path with a newline, and a distilled model not found under another HOME.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from stage_runs import REPO, SEED, build_staged_run, cli

from forensics_testing.refusal import one_line_error


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return build_staged_run(tmp_path_factory.mktemp("staged"))


@pytest.mark.parametrize("name", ["run\nname: injected", "tab\there", "esc\x1b[2J"])
def test_control_characters_in_a_config_name_are_refused(
    staged: dict, tmp_path: Path, name: str
) -> None:
    import yaml

    raw = yaml.safe_load(staged["config"].read_text())
    raw["name"] = name
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw))
    proc = cli("check-skip", str(staged["skip"]), "--config", str(config))
    one_line_error(proc, "holds a control character", str(config))
    raw["name"] = "ok"
    raw["data"]["stages"][0]["blend"][0]["name"] = name
    config.write_text(yaml.safe_dump(raw))
    one_line_error(
        cli("check-skip", str(staged["skip"]), "--config", str(config)), "control character"
    )


BASE_ARGS = "--data-path 0.5 data/web 0.5 data/code --seq-length 32 --global-batch-size 8 "


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("--dataloader-type cyclic", "--dataloader-type cyclic is not replayed"),
        ("--dataloader-type=external", "--dataloader-type external is not replayed"),
        ("--phase-transition-iterations 100,200", "--phase-transition-iterations (phases"),
        ("--fim-data", "--fim-data (the FIM dataset"),
        ("--sft", "--sft (the SFT dataset"),
        ("--hybrid-context-parallel", "--hybrid-context-parallel (the hybrid"),
        ("--per-dataset-sequences-path=s.json", "--per-dataset-sequences-path (sequence counts"),
    ],
)
def test_megatron_arguments_that_change_the_order_are_refused(
    staged: dict, extra: str, needle: str
) -> None:
    args = BASE_ARGS + "--train-iters 60 " + extra
    proc = cli("check-skip", str(staged["skip"]), "--megatron-args", args, cwd=staged["root"])
    one_line_error(proc, needle)


def test_dataloader_type_single_is_the_default_and_accepted(staged: dict) -> None:
    from dataloaders.megatron.launch_args import config_from_megatron_args
    from dataloaders.run_config import config_from_dict

    argv = shlex.split(BASE_ARGS + "--train-iters 60 --dataloader-type single")
    config = config_from_megatron_args(argv, config_from_dict=config_from_dict, cwd=staged["root"])
    assert [s.display_name for s in config.data.data_stages[0].blend] == ["web", "code"]


def triage_log(tmp_path: Path, n: int = 3000) -> Path:
    from forensics_testing import loss_curves

    log = tmp_path / "train.log"
    log.write_text("\n".join(loss_curves.megatron_lines(loss_curves.make("malignant_step", n=n))))
    return log


def test_a_checkpoint_every_50_iterations_is_a_list_not_a_path(tmp_path: Path) -> None:
    every = ",".join(str(i) for i in range(50, 2801, 50))
    proc = cli("triage", str(triage_log(tmp_path)), "--out", str(tmp_path / "t"),
               "--checkpoints", every)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = json.loads((tmp_path / "t" / "events.json").read_text())
    assert events, "triage found nothing on a malignant curve"


@pytest.mark.parametrize(
    ("option", "value", "needle"),
    [
        ("--grad-factor", "nan", "--grad-factor nan: must be a finite number"),
        ("--grad-factor", "0.5", "--grad-factor 0.5: must be above 1"),
        ("--z-threshold", "-1", "--z-threshold -1.0: must be positive"),
        ("--z-threshold", "inf", "--z-threshold inf: must be a finite number"),
    ],
)
def test_detector_thresholds_that_never_fire_are_refused(
    tmp_path: Path, option: str, value: str, needle: str
) -> None:
    log = tmp_path / "train.log"
    log.write_text(" iteration        1/    10 | lm loss: 5.0E+00 |\n")
    proc = cli("triage", str(log), "--out", str(tmp_path / "t"), option, value)
    one_line_error(proc, needle)
    assert not (tmp_path / "t").exists()


def test_embed_cap_below_zero_is_refused(staged: dict, tmp_path: Path) -> None:
    proc = cli("spike", "--config", str(staged["config"]), "--step", "36", "--window", "5",
               "--embed-cap", "-1", "--out", str(tmp_path / "s"))  # fmt: skip
    one_line_error(proc, "--embed-cap -1: must be >= 0")
    assert not (tmp_path / "s").exists()


def test_triage_refuses_a_fifo_and_a_pipe_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "forensics.cli", "triage", str(fifo), "--out", str(tmp_path / "t")],
        capture_output=True, text=True, timeout=60, env=os.environ | {"PYTHONPATH": str(REPO)},
    )  # fmt: skip
    one_line_error(proc, str(fifo), "is a FIFO or pipe, not a regular file")
    piped = subprocess.run(
        [sys.executable, "-m", "forensics.cli", "triage", "/dev/stdin", "--out",
         str(tmp_path / "t")],
        input=" iteration        1/    10 | lm loss: 5.0E+00 |\n", capture_output=True, text=True,
        timeout=60, env=os.environ | {"PYTHONPATH": str(REPO)},
    )  # fmt: skip
    one_line_error(piped, "/dev/stdin", "a FIFO or pipe")


def test_deeply_nested_json_is_refused_in_one_line(staged: dict, tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    skip = tmp_path / "skip.json"
    skip.write_text(deep)
    for command in (("check-skip",), ("rebuild", "--out", str(tmp_path / "o"))):
        proc = cli(command[0], str(skip), "--config", str(staged["config"]), *command[1:])
        one_line_error(proc, str(skip), "nested too deeply")
    jsonl = tmp_path / "deep.jsonl"
    jsonl.write_text('{"a": 1}\n' + deep + "\n")
    proc = cli("manifest", str(jsonl), "--fields", "a", "--out", str(tmp_path / "m.parquet"))
    one_line_error(proc, f"{jsonl}:2", "nested too deeply")


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ("seed: 010", "010 has a leading zero, which YAML reads as an octal number"),
        ("name: first\nname: second", "key 'name' is given twice in one mapping"),
    ],
)
def test_yaml_that_reads_other_than_it_looks_is_refused(
    staged: dict, tmp_path: Path, edit: str, needle: str
) -> None:
    text = staged["config"].read_text()
    if edit.startswith("seed"):
        text = text.replace(f"seed: {SEED}", edit)
    else:
        text = text.replace("name: staged", edit)
    config = tmp_path / "c.yaml"
    config.write_text(text)
    proc = cli("check-skip", str(staged["skip"]), "--config", str(config))
    one_line_error(proc, str(config), needle)


def test_a_distilled_model_is_found_when_home_points_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("model2vec")
    from forensics.cluster.static_model import static_model_dir

    source = tmp_path / "minilm"
    source.mkdir()
    monkeypatch.delenv("FORENSICS_MODEL_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    where = static_model_dir(source)
    assert where.parent == tmp_path / "xdg" / "forensics" / "models"  # nothing yet: the first
    installed = tmp_path / "home" / ".cache" / "forensics" / "models" / where.name
    installed.mkdir(parents=True)
    (installed / "model.safetensors").write_bytes(b"x")
    assert static_model_dir(source) == installed  # found, not distilled again under xdg
    monkeypatch.setenv("HOME", "")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert static_model_dir(source).is_absolute()  # never a folder relative to the cwd


def test_an_output_path_with_a_newline_is_refused(staged: dict, tmp_path: Path) -> None:
    out = tmp_path / "a\nFIRST: rm -rf ~"
    proc = cli("rebuild", str(staged["skip"]), "--config", str(staged["config"]), "--out", str(out))
    one_line_error(proc, "holds a control character ('\\n')")
    spike = cli("spike", "--config", str(staged["config"]), "--step", "36", "--window", "5",
                "--out", str(out))  # fmt: skip
    one_line_error(spike, "holds a control character")
    assert not out.exists()


def test_distilling_under_quiet_prints_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("model2vec")
    import model2vec.distill
    from model2vec.distill import inference

    from forensics.cluster.static_model import ensure_static_model

    class Saved:
        def save_pretrained(self, folder: str) -> None:
            Path(folder).mkdir(parents=True)
            (Path(folder) / "model.safetensors").write_bytes(b"x")

    def fake_distill(**_: object) -> Saved:
        bar = inference.tqdm(total=3, desc="Encoding tokens")  # as model2vec's inference does
        bar.update(3)
        bar.close()
        return Saved()

    monkeypatch.setattr(model2vec.distill, "distill", fake_distill)
    monkeypatch.setenv("FORENSICS_MODEL_DIR", str(tmp_path / "models"))
    (tmp_path / "minilm").mkdir()
    target = ensure_static_model(tmp_path / "minilm", quiet=True)
    assert (target / "model.safetensors").is_file()
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == "", captured
    assert inference.tqdm.__name__ == "tqdm"  # put back as it was
