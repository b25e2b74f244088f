"""A checkpoint's planted code never runs: `rescore --checkpoint`, `spike --checkpoint` and the
spike `watch` starts refuse, in one line naming the file and the pickled global, before any work.

The checkpoints are written by the real writers and then planted (forensics_testing.planted: one
object whose unpickling runs `touch MARKER`):
- Megatron legacy `mp_rank_00/model_optim_rng.pt`: torch.save of generate_state_dict's keys around
  the Namespace Megatron-LM's own parser made (forensics_testing.megatron_checkpoints);
- Megatron torch_dist: `common.pt` by megatron-core's own save_preprocess and common strategy,
  `metadata.json` by its save_config (megatron-core 0.16.1 dist_checkpointing/core.py:76), the
  tensor shards and `.metadata` by torch's FileSystemWriter (torch 2.13
  torch/distributed/checkpoint/filesystem.py), the format torch_dist is;
- OLMo-core `model_and_optim/.metadata`: test_olmo_core_checkpoint.py, whose checkpoint
  ai2-olmo-core itself wrote; Megatron files megatron-core itself wrote: test_megatron.py.
Each unplanted checkpoint passes the same check, so the refusal is the payload's. The marker is
looked for after every command: a reader that unpickled the payload would have made it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core")

from forensics.errors import ForensicsError  # noqa: E402
from forensics.rescore import RescoreOptions  # noqa: E402
from forensics_testing.megatron_checkpoints import megatron_args, write_legacy  # noqa: E402
from forensics_testing.planted import plant_in_dcp_metadata, plant_in_torch_save  # noqa: E402
from forensics_testing.refusal import one_line_error  # noqa: E402
from forensics_testing.small_run import SMALL, cli  # noqa: E402

ITER = "iter_0000010"
EXTRA_STATE = "decoder.layers.0.self_attention.core_attention._extra_state"


def _torch_dist(save: Path) -> Path:
    """A Megatron torch_dist iteration directory (see the module docstring for the writers)."""
    import warnings

    import torch.distributed.checkpoint as dcp
    from megatron.core.dist_checkpointing.core import CheckpointingConfig, save_config

    from forensics_testing.megatron_checkpoints import write_torch_dist

    folder = write_torch_dist(save, 10, megatron_args()).parent
    with warnings.catch_warnings():  # 'assuming ... a single process': intended
        warnings.simplefilter("ignore")
        dcp.save({"embedding.word_embeddings.weight": torch.zeros(8, 4)},
                 storage_writer=dcp.FileSystemWriter(str(folder)), no_dist=True)  # fmt: skip
    save_config(CheckpointingConfig("torch_dist"), str(folder))
    return folder


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Unplanted checkpoints, each passing the check a planted copy must fail."""
    root = tmp_path_factory.mktemp("clean")
    write_legacy(root / "legacy", 10, megatron_args())
    found = {"legacy": root / "legacy" / ITER, "torch_dist": _torch_dist(root / "torch_dist")}
    for path in found.values():
        RescoreOptions(checkpoint=path).check()
    return found


# (layout, file planted, where in the file)
PLANTS = {
    "legacy model_optim_rng.pt": (
        "legacy",
        "mp_rank_00/model_optim_rng.pt",
        ("model", EXTRA_STATE),
    ),
    "torch_dist common.pt": ("torch_dist", "common.pt", ("optimizer",)),
    "torch_dist .metadata": ("torch_dist", ".metadata", None),
}


def _planted(clean: dict[str, Path], case: str, tmp_path: Path) -> tuple[Path, Path, Path]:
    """(checkpoint, planted file, marker) for a copy of the clean checkpoint."""
    layout, name, where = PLANTS[case]
    checkpoint = tmp_path / "ckpt" / ITER
    shutil.copytree(clean[layout], checkpoint)
    marker = tmp_path / "MARKER"
    target = checkpoint / name
    if where is None:
        plant_in_dcp_metadata(target, marker)
    else:
        plant_in_torch_save(target, marker, where)
    return checkpoint, target, marker


def _command(kind: str, run: Path, checkpoint: Path, out: Path) -> list[str]:
    step = str(SMALL.spike_iteration)
    common = ["--config", str(run / "forensics.yaml"), "--step", step, "--window", "10"]
    extra = ["--embed-cap", "0"] if kind == "spike" else []
    return [kind, *common, *extra, "--checkpoint", str(checkpoint), "--out", str(out), "--quiet"]


@pytest.mark.parametrize("command", ["rescore", "spike"])
@pytest.mark.parametrize("case", list(PLANTS))
def test_planted_code_is_refused_by_name_and_never_runs(
    clean: dict[str, Path], small_run: Path, tmp_path: Path, case: str, command: str
) -> None:
    checkpoint, target, marker = _planted(clean, case, tmp_path)
    out = tmp_path / "out"
    proc = cli(*_command(command, small_run, checkpoint, out))
    line = one_line_error(proc, f"{target}: holds a pickled posix.system", "refusing to unpickle")
    assert "forensics runs no code from a checkpoint" in line
    assert not marker.exists(), "the planted code ran"
    assert not out.exists(), "an output was started before the refusal"


def test_the_loader_refuses_it_too_without_the_check(
    clean: dict[str, Path], tmp_path: Path
) -> None:
    """The model load is gated on its own (a caller that skips `check` runs nothing either)."""
    from forensics.rescore.megatron import load_megatron

    for case in PLANTS:
        checkpoint, target, marker = _planted(clean, case, tmp_path / case.replace(" ", "_"))
        with pytest.raises(ForensicsError, match="holds a pickled posix.system") as err:
            load_megatron(checkpoint, "float32")
        assert str(target) in str(err.value)
        assert not marker.exists(), case


def test_the_planted_payload_is_live(clean: dict[str, Path], tmp_path: Path) -> None:
    """The tests above can fail: read the way torch's own loaders read them (torch.load with
    weights_only=False, FileSystemReader's plain pickle.load), the planted files run the code."""
    import pickle

    for case, (_layout, name, _where) in PLANTS.items():
        _checkpoint, target, marker = _planted(clean, case, tmp_path / case.replace(" ", "_"))
        if name == ".metadata":
            with open(target, "rb") as stream:
                pickle.load(stream)  # noqa: S301 - the point: this is what must never happen
        else:
            torch.load(target, weights_only=False)
        assert marker.exists(), case


def test_watch_starts_a_spike_that_refuses_the_planted_checkpoint(
    clean: dict[str, Path], small_run: Path, tmp_path: Path
) -> None:
    """`watch --spike-args '--checkpoint DIR'` runs the same `spike`: its failure message names
    the file and the global, and nothing ran."""
    import time

    from forensics.triage.config import TriageConfig
    from forensics.watch.loop import Watcher, WatchOptions

    checkpoint, target, marker = _planted(clean, "legacy model_optim_rng.pt", tmp_path)
    lines = (small_run / "logs" / "train.log").read_text().splitlines()
    log, out = tmp_path / "live.log", tmp_path / "w"
    log.write_text("")
    w = Watcher(
        WatchOptions(
            log=log,
            out=out,
            interval=0.01,
            cfg=TriageConfig(recovery_window=20),
            config=str(small_run / "forensics.yaml"),
            spike_args=("--embed-cap", "0", "--checkpoint", str(checkpoint)),
        )
    )
    msgs: list[dict] = []
    for at in range(0, len(lines), 20):
        with open(log, "a") as fh:
            fh.write("\n".join(lines[at : at + 20]) + "\n")
        msgs += w.poll()
    deadline = time.monotonic() + 120
    while not any(m["message"] == "forensics" for m in msgs) and time.monotonic() < deadline:
        time.sleep(0.2)
        msgs += w.poll()
    w.close()
    (done,) = [m for m in msgs if m["message"] == "forensics"]
    assert not done["ok"] and done["returncode"] == 2, done
    assert f"{target}: holds a pickled posix.system" in done["summary"], done["summary"]
    assert not marker.exists(), "the planted code ran"


def test_hf_weights_pickling_another_global_is_a_one_line_refusal(
    small_run: Path, tmp_path: Path
) -> None:
    """A pytorch_model.bin holding anything beyond tensors (here a pickled argparse.Namespace,
    which transformers' weights-only load refuses with a traceback) is refused by name."""
    import argparse

    from transformers import GPT2Config, GPT2LMHeadModel

    model_dir = tmp_path / "hf"
    config = GPT2Config(vocab_size=SMALL.vocab_size, n_positions=128, n_embd=16, n_layer=1,
                        n_head=2)  # fmt: skip
    config.save_pretrained(model_dir)
    weights = model_dir / "pytorch_model.bin"  # what save_pretrained wrote before safetensors
    torch.save(GPT2LMHeadModel(config).state_dict(), weights)
    RescoreOptions(checkpoint=model_dir).check()  # plain tensors: accepted
    state = torch.load(weights, weights_only=True)
    state["extra"] = argparse.Namespace(x=1)
    torch.save(state, weights)
    proc = cli(*_command("rescore", small_run, model_dir, tmp_path / "out"))
    one_line_error(proc, f"{weights}: holds a pickled argparse.Namespace", "Hugging Face weights")
