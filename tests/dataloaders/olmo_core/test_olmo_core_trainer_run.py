"""OLMo-core runs as the library's own Trainer leaves them (ai2-olmo-core 3.0.0 in .venv-olmo):
tests/oracles/olmo_core_trainer.py trains a tiny model on CPU with NumpyFSLDatasetConfig,
NumpyDataLoaderConfig, the CheckpointerCallback and the ConfigSaverCallback, restarts the job
from its newest checkpoint, and records every step's instance indices and token ids.

The replay must give exactly those instances and tokens when
- the config restarts from the trainer's own `step8/train/rank0.pt` (Trainer.state_dict(), with
  its numpy RNG state), the dtype is left to the library (uint32 for a 100,278-token vocabulary),
  the paths are globs (`expand_glob`) and `source_permutation_seed` reorders them;
- the run reads a DataMix (`mix`, `mix_base_dir`, the mix's listing file from the package);
- the config is built from the save folder alone (config.json, data_paths.txt, rank0.pt).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from dataloaders.olmo_core import paths as olmo_paths
from dataloaders.olmo_core.config import olmo_core_dtype
from dataloaders.olmo_core.saved_config import run_config_from_save_folder
from dataloaders.run_config import config_from_dict
from dataloaders.safe_pickle import globals_beyond_torch_defaults
from dataloaders.trainers.olmo_core import OLMoCore
from forensics.errors import ForensicsError
from forensics.replay import open_replayer
from forensics_testing.olmo_core_run import oracle_python

ORACLE = Path(__file__).resolve().parents[2] / "oracles" / "olmo_core_trainer.py"
DOLMA2 = {"vocab_size": 100278, "eos_token_id": 100257, "pad_token_id": 100277}
SEQ, IPB = 32, 8
MIX = "v3-small-ppl-validation"
TOKENIZER_ID = "allenai/dolma2-tokenizer"
GLOBS = ["data/web/*.npy", "data/code/**/*.npy"]
PERMUTATION_SEED = 3
VOCABS = [1, 2, 255, 256, 257, 65535, 65536, 65537, 100278, 2**32, 2**32 + 1, 2**64, 2**64 + 1]


def _write_tokens(path: Path, rng: np.random.Generator, docs: int) -> None:
    """A Dolma-style token file of uint32 ids (most above 65,535), EOS-terminated documents."""
    path.parent.mkdir(parents=True, exist_ok=True)
    parts = [
        np.append(rng.integers(0, 100257, size=int(n)), DOLMA2["eos_token_id"])
        for n in rng.integers(3, 70, size=docs)
    ]
    np.concatenate(parts).astype(np.uint32).tofile(path)


def _mix_listing() -> Path:
    """The mix's listing file as ai2-olmo-core ships it (its package data)."""
    site = oracle_python().parents[1] / "lib"
    found = sorted(site.glob(f"python*/site-packages/olmo_core/data/mixes/{MIX}.txt"))
    assert found, "ai2-olmo-core's mix files"
    return found[0]


def _glob_spec(folder: Path) -> dict[str, Any]:
    return {
        "paths": [str(folder / g) for g in GLOBS],
        "expand_glob": True,
        "source_permutation_seed": PERMUTATION_SEED,
        "sequence_length": SEQ,
        "tokenizer": DOLMA2,
        "work_dir": str(folder / "work-glob"),
        "global_batch_size": IPB * SEQ,
        "seed": 17,
        "save_folder": str(folder / "save-glob"),
        "max_steps": 14,
        "stop_after": 8,
        "save_interval": 4,
    }


def _mix_spec(folder: Path) -> dict[str, Any]:
    return {
        "mix": MIX,
        "mix_base_dir": str(folder / "mixbase"),
        "source_permutation_seed": 11,
        "sequence_length": SEQ,
        "tokenizer": {**DOLMA2, "identifier": TOKENIZER_ID},
        "work_dir": str(folder / "work-mix"),
        "global_batch_size": IPB * SEQ,
        "seed": 5,
        "save_folder": str(folder / "save-mix"),
        "max_steps": 6,
        "save_interval": 3,
    }


def _changed_spec(folder: Path) -> dict[str, Any]:
    """Six steps over the web files, then a restart from step6 on web + code files."""
    return {
        **_glob_spec(folder),
        "paths": [str(folder / GLOBS[0])],
        "restart_paths": [str(folder / g) for g in GLOBS],
        "source_permutation_seed": None,
        "work_dir": str(folder / "work-changed"),
        "save_folder": str(folder / "save-changed"),
        "max_steps": 10,
        "stop_after": 6,
        "save_interval": 3,
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """Token files, then the library's two training jobs over them (one interpreter)."""
    folder = tmp_path_factory.mktemp("olmo-trainer")
    rng = np.random.default_rng(9)
    for name in ("a-0", "a-1", "b-0"):
        _write_tokens(folder / "data" / "web" / f"{name}.npy", rng, 40)
    _write_tokens(folder / "data" / "code" / "x" / "c-0.npy", rng, 50)
    _write_tokens(folder / "data" / "code" / "y" / "z" / "c-1.npy", rng, 30)
    (folder / "data" / "web" / "notes.txt").write_text("not a token file")
    mix_data = olmo_paths.mix_paths(_mix_config(folder))  # where the library will look
    for _, path in mix_data:
        _write_tokens(path, rng, 25)
    jobs = {
        "runs": [_glob_spec(folder), _mix_spec(folder), _changed_spec(folder)],
        "vocab_sizes": VOCABS,
        "globs": [str(folder / g) for g in GLOBS] + [str(folder / "data/*/x/*.npy")],
    }
    (folder / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run(
        [str(oracle_python()), str(ORACLE), str(folder / "jobs.json"), str(folder / "out.json")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return folder, json.loads((folder / "out.json").read_text())


def _mix_config(folder: Path) -> Any:
    class Data:  # the fields paths.mix_paths reads, before a config exists
        mix = MIX
        mix_base_dir = folder / "mixbase"
        mix_file = _mix_listing()
        tokenizer_identifier = TOKENIZER_ID

    return Data


def _config(folder: Path, data: dict[str, Any], iters: int) -> Any:
    """Our run config as a user writes it (no dtype: the library infers it)."""
    raw = {
        "name": "olmo-trainer-run",
        "data": {
            "format": "olmo-core",
            **{k: v for k, v in DOLMA2.items()},
            "sequence_length": SEQ,
            "global_batch_size": IPB * SEQ,
            "dp_world_size": 1,
            **data,
        },
        "training": {"global_batch_size": IPB, "train_iters": iters},
    }
    return config_from_dict(raw, base_dir=folder, source=None)


def _assert_replays(config: Any, steps: dict[str, Any]) -> None:
    """Every step's instances, in rank order, and every instance's tokens are the library's."""
    replayer = open_replayer(config)
    its = np.arange(1, len(steps) + 1)
    assert sorted(int(k) for k in steps) == its.tolist()
    grid = replayer.batch_instances(its)
    for it in its.tolist():
        assert grid[it - 1].tolist() == steps[str(it)]["index"], f"step {it}"
    table = replayer.replay(1, len(steps), progress=False)
    tokens: dict[tuple[int, int], list[int]] = {}
    for row in table.sort("iteration", "position", "doc_id", "token_start").iter_rows(named=True):
        f = replayer._file_index[Path(row["file"])]
        start, _ = replayer._doc_span(f, row["doc_id"] & ((1 << 40) - 1))
        part = np.fromfile(row["file"], dtype=np.uint32)[
            start + row["token_start"] : start + row["token_end"]
        ]
        tokens.setdefault((row["iteration"], row["position"]), []).extend(part.tolist())
    for it in its.tolist():
        for pos, ids in enumerate(steps[str(it)]["input_ids"]):
            assert tokens[(it, pos)] == ids, f"tokens of step {it} position {pos}"


def test_restart_from_the_trainers_own_rank0_pt(trained):
    """The config restarts from the trainer's own train/rank0.pt: its "rng" state holds numpy
    arrays (which a plain weights_only load refuses) and is read with only those allowed."""
    folder, out = trained
    state = folder / "save-glob" / "step8" / "train" / "rank0.pt"
    # read unregistered: megatron-core, once imported by another test, registers numpy's types
    assert "numpy.ndarray" in globals_beyond_torch_defaults(state)
    registered = torch.serialization.get_safe_globals()
    torch.serialization.clear_safe_globals()
    try:
        with pytest.raises(Exception, match="Weights only load failed"):
            torch.load(state, weights_only=True)
    finally:
        torch.serialization.add_safe_globals(registered)
    config = _config(
        folder,
        {
            "sources": [
                {"name": "web", "paths": [GLOBS[0]]},
                {"name": "code", "paths": [GLOBS[1]]},
            ],
            "expand_glob": True,
            "source_permutation_seed": PERMUTATION_SEED,
            "seed": 17,
            "resumes": [{"iteration": 9, "state": str(state)}],
        },
        14,
    )
    assert config.data.dtype == "uint32"
    order = olmo_paths.permutation(5, PERMUTATION_SEED)
    assert order != sorted(order), "the permutation reorders the files"
    _assert_replays(config, out["runs"][0]["steps"])


def test_a_wrong_resume_state_is_still_refused(trained):
    """The trainer state is checked, not trusted: another seed is a one-line refusal."""
    folder, _ = trained
    state = folder / "save-glob" / "step8" / "train" / "rank0.pt"
    config = _config(
        folder,
        {
            "sources": [{"name": "web", "paths": [GLOBS[0], GLOBS[1]]}],
            "expand_glob": True,
            "source_permutation_seed": PERMUTATION_SEED,
            "seed": 18,
            "resumes": [{"iteration": 9, "state": str(state)}],
        },
        14,
    )
    with pytest.raises(ForensicsError, match=r"rank0.pt: seed 17 differs from the config \(18\)"):
        open_replayer(config)


def test_a_state_needing_other_globals_is_refused_unread(tmp_path):
    """Only the numpy RNG globals are allowed: anything else is refused before unpickling."""
    bad = tmp_path / "train" / "rank0.pt"
    bad.parent.mkdir()
    torch.save({"data_loader": {}, "extra": argparse.Namespace(x=1)}, bad)
    config = _config(
        tmp_path,
        {
            "sources": [{"name": "web", "paths": ["x.npy"]}],
            "seed": 1,
            "resumes": [{"iteration": 3, "state": str(bad)}],
        },
        4,
    )
    _write_tokens(tmp_path / "x.npy", np.random.default_rng(1), 40)
    with pytest.raises(ForensicsError) as err:
        open_replayer(config)
    message = str(err.value)
    assert message.startswith(f"{bad}: holds a pickled argparse.Namespace, which an OLMo-core")
    assert "refusing to unpickle it" in message and "\n" not in message


def test_dtype_default_is_the_librarys(trained, tmp_path):
    """dtype left unset: the library's get_dtype on each vocabulary size; none given: refused."""
    _, out = trained
    for vocab in VOCABS:
        want = out["dtypes"][str(vocab)]
        if want is None:
            with pytest.raises(ValueError, match="too big"):
                olmo_core_dtype(vocab)
        else:
            assert olmo_core_dtype(vocab) == want, vocab
    raw = {
        "data": {
            "format": "olmo-core",
            "sources": [{"name": "a", "paths": ["a.npy"]}],
            "sequence_length": 8,
            "eos_token_id": 0,
            "pad_token_id": 1,
            "global_batch_size": 64,
            "seed": 1,
            "dp_world_size": 1,
        },
        "training": {"global_batch_size": 8, "train_iters": 2},
    }
    with pytest.raises(ForensicsError) as err:
        config_from_dict(raw, base_dir=tmp_path, source=tmp_path / "run.yaml")
    assert "set data.dtype or data.vocab_size" in str(err.value)
    raw["data"]["vocab_size"] = 50280  # gpt-neox-olmo-dolma-v1_5
    assert config_from_dict(raw, base_dir=tmp_path, source=None).data.dtype == "uint16"


def test_library_defaults_of_the_other_fields(trained, tmp_path):
    """Each field the library defaults is defaulted the same (read from the library's own config
    classes); each one it does not default is required here too."""
    _, out = trained
    lib = out["defaults"]
    base = {
        "format": "olmo-core",
        "sources": [{"name": "a", "paths": ["a.npy"]}],
        "sequence_length": 8,
        **DOLMA2,
        "global_batch_size": 64,
        "seed": 1,
        "dp_world_size": 1,
    }
    training = {"global_batch_size": 8, "train_iters": 2}
    data = config_from_dict(
        {"data": base, "training": training}, base_dir=tmp_path, source=None
    ).data
    ours_vs_library = {
        "max_target_sequence_length": lib["dataset"]["max_target_sequence_length"],
        "bos_token_id": lib["tokenizer"]["bos_token_id"],
        "instance_filter": lib["dataset"]["instance_filter_config"],
        "expand_glob": lib["dataset"]["expand_glob"],
        "source_permutation_seed": lib["dataset"]["source_permutation_seed"],
        "mix": lib["dataset"]["mix"],
        "mix_base_dir": lib["dataset"]["mix_base_dir"],
        "generate_doc_lengths": lib["dataset"]["generate_doc_lengths"],
        "work_dir": lib["dataset"]["work_dir"],
        "shuffle": lib["shuffle"],
    }
    for name, value in ours_vs_library.items():
        assert getattr(data, name) == value, name
    assert lib["dataset"]["dtype"] is None  # inferred: test_dtype_default_is_the_librarys
    with_filter = config_from_dict(
        {"data": {**base, "instance_filter": {}}, "training": training},
        base_dir=tmp_path,
        source=None,
    ).data.instance_filter
    assert with_filter is not None and with_filter.model_dump() == lib["filter"]
    required = {
        "seed": lib["loader"]["seed"],
        "global_batch_size": lib["loader"]["global_batch_size"],
        "sequence_length": lib["dataset"]["sequence_length"],
        "vocab_size": lib["tokenizer"]["vocab_size"],
        "eos_token_id": lib["tokenizer"]["eos_token_id"],
        "pad_token_id": lib["tokenizer"]["pad_token_id"],
        "dp_world_size": "<required>",  # the process group's size (data_loader.py:1157)
    }
    for name, default in required.items():
        assert default == "<required>", name
        raw = {k: v for k, v in base.items() if k != name}
        if name == "vocab_size":
            raw["dtype"] = "uint32"  # else the dtype refusal comes first
        message = "set data.dp_world_size" if name == "dp_world_size" else f"{name}: Field required"
        with pytest.raises(ForensicsError, match=message):
            config_from_dict(
                {"data": raw, "training": training}, base_dir=tmp_path, source=tmp_path / "r"
            )


def test_globs_expand_as_the_library(trained):
    """deterministic_glob_directory's matches, order and misses ('*' never crosses a folder
    below the listed one, so 'data/*/x/*.npy' matches nothing in the library either)."""
    folder, out = trained
    for pattern, want in out["globs"].items():
        assert olmo_paths._glob_directory(pattern) == want, pattern
    assert out["globs"][str(folder / "data/*/x/*.npy")] == []
    with pytest.raises(ForensicsError, match=r"x/\*.npy: the pattern matches no file"):
        olmo_paths.expand_globs("web", [folder / "data/*/x/*.npy"])


def test_a_data_mix_replays_as_the_library(trained):
    """mix + mix_base_dir + the package's listing file: the library's files, labels and order."""
    folder, out = trained
    run = out["runs"][1]
    mine = olmo_paths.mix_paths(_mix_config(folder))
    assert [str(p) for _, p in mine] == run["mix"]["paths"]
    assert [label for label, _ in mine] == run["mix"]["labels"]
    config = _config(
        folder,
        {
            "mix": MIX,
            "mix_base_dir": "mixbase",
            "mix_file": str(_mix_listing()),
            "tokenizer_identifier": TOKENIZER_ID,
            "source_permutation_seed": 11,
            "seed": 5,
        },
        6,
    )
    _assert_replays(config, run["steps"])
    replayer = open_replayer(config)
    assert set(replayer.sources) == set(run["mix"]["labels"])


def test_mix_needs_its_listing_file(tmp_path):
    raw = {
        "data": {
            "format": "olmo-core",
            "mix": MIX,
            "mix_base_dir": "mixbase",
            "tokenizer_identifier": TOKENIZER_ID,
            "sequence_length": 8,
            **DOLMA2,
            "global_batch_size": 64,
            "seed": 1,
            "dp_world_size": 1,
        },
        "training": {"global_batch_size": 8, "train_iters": 2},
    }
    with pytest.raises(ForensicsError, match="data.mix needs data.mix_file"):
        config_from_dict(raw, base_dir=tmp_path, source=tmp_path / "r")
    raw["data"] |= {"mix": "my-own-mix", "mix_file": str(tmp_path / "m.txt")}
    config = config_from_dict(raw, base_dir=tmp_path, source=None)
    with pytest.raises(ForensicsError, match="'my-own-mix' is not one of OLMo-core's DataMix"):
        open_replayer(config)


def _saved(folder: Path, name: str) -> Any:
    raw = run_config_from_save_folder(folder / name)
    return raw, config_from_dict(raw, base_dir=folder, source=None)


def test_the_run_from_its_save_folder(trained, tmp_path):
    """config.json + data_paths.txt + rank0.pt of the library's save folder describe the run."""
    folder, out = trained
    raw, config = _saved(folder, "save-glob")
    steps = sorted(int(p.name[4:]) for p in (folder / "save-glob").glob("step*"))
    assert raw["checkpoints"] == steps and 8 in steps
    assert "dtype" not in raw["data"] and config.data.dtype == "uint32"
    assert raw["data"]["seed"] == 17 and raw["data"]["dp_world_size"] == 1
    assert raw["training"] == {"global_batch_size": IPB, "train_iters": 14, "trainer": "olmo-core"}
    _assert_replays(config, out["runs"][0]["steps"])
    # a step folder stands for its save folder
    assert run_config_from_save_folder(folder / "save-glob" / "step8") == raw
    # without data_paths.txt: the saved globs and permutation are resolved as the library does
    copy = tmp_path / "save-glob"
    shutil.copytree(folder / "save-glob", copy)
    for listing in copy.glob("step*/data_paths.txt"):
        listing.unlink()
    raw2, config2 = _saved(tmp_path, "save-glob")
    assert raw2["data"]["expand_glob"] is True
    assert raw2["data"]["source_permutation_seed"] == PERMUTATION_SEED
    _assert_replays(config2, out["runs"][0]["steps"])


_FIND_CHECKPOINTS = (
    "import json, sys; from olmo_core.train.checkpoint import Checkpointer; "
    "print(json.dumps(sorted(step for step, _ in Checkpointer.find_checkpoints(sys.argv[1]))))"
)


def test_the_trainers_checkpoints_are_those_olmo_core_finds(trained, tmp_path):
    """`OLMoCore.checkpoints` lists what OLMo-core's own `Checkpointer.find_checkpoints` lists
    (ai2-olmo-core 3.0.0, olmo_core/train/checkpoint.py:357-383) in a save folder its trainer
    wrote, beside folders only named like a checkpoint: an empty `step99`, one holding the
    trainer state alone, and a `step6-tmp`."""
    folder, _ = trained
    save = tmp_path / "save-glob"
    shutil.copytree(folder / "save-glob", save)
    (save / "step99").mkdir()
    (save / "step98" / "train").mkdir(parents=True)
    shutil.copy(save / "step8" / "train" / "rank0.pt", save / "step98" / "train" / "rank0.pt")
    (save / "step6-tmp").mkdir()
    found = subprocess.run(
        [str(oracle_python()), "-c", _FIND_CHECKPOINTS, str(save)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert found.returncode == 0, found.stderr[-2000:]
    theirs = json.loads(found.stdout.strip().splitlines()[-1])
    assert 8 in theirs and 98 not in theirs
    assert OLMoCore().checkpoints(save) == theirs
    assert all((save / OLMoCore().checkpoint_name(s)).is_dir() for s in theirs)


def test_from_checkpoint_reads_the_library_save_folder(trained, monkeypatch):
    """`--from-checkpoint SAVE_FOLDER` on the folder ai2-olmo-core's Trainer wrote: the same run
    as run_config_from_save_folder, and it replays what the Trainer fed."""
    from forensics.from_checkpoint import config_from_checkpoint

    folder, out = trained
    monkeypatch.chdir(folder)
    said: list[str] = []
    config = config_from_checkpoint(folder / "save-glob", None, said.append)
    assert config.data.dtype == "uint32" and config.data.seed == 17
    assert any("step*/config.json" in line for line in said)
    _assert_replays(config, out["runs"][0]["steps"])


def test_a_mix_run_from_its_save_folder(trained, tmp_path):
    folder, out = trained
    raw, config = _saved(folder, "save-mix")
    assert raw["data"]["sources"][0]["name"] == MIX
    _assert_replays(config, out["runs"][1]["steps"])
    copy = tmp_path / "save-mix"
    shutil.copytree(folder / "save-mix", copy)
    for listing in copy.glob("step*/data_paths.txt"):
        listing.unlink()
    with pytest.raises(ForensicsError, match="reads data mix 'v3-small-ppl-validation'"):
        run_config_from_save_folder(copy)


def test_a_restart_on_other_data_from_its_save_folder(trained, tmp_path):
    """Checkpoints whose token files changed: the job restarted on other data from the newest
    checkpoint before them; the replay continues over the new files from there."""
    folder, out = trained
    raw, config = _saved(folder, "save-changed")
    (resume,) = raw["data"]["resumes"]
    assert resume["iteration"] == 7 and resume["state"].endswith("step6/train/rank0.pt")
    assert len(resume["sources"][0]["paths"]) == 5 and len(raw["data"]["sources"][0]["paths"]) == 3
    _assert_replays(config, out["runs"][2]["steps"])
    # another change than the token files is refused, naming the field and the checkpoints
    copy = tmp_path / "save-changed"
    shutil.copytree(folder / "save-changed", copy)
    saved = json.loads((copy / "step9" / "config.json").read_text())
    saved["data_loader"]["seed"] = 99
    (copy / "step9" / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ForensicsError, match=r"step9/config.json: data.seed is 99, 17 in step6"):
        run_config_from_save_folder(copy)


def test_save_folder_refusals(trained, tmp_path):
    """Whatever the folder lacks is one line naming it."""
    folder, _ = trained
    with pytest.raises(ForensicsError, match="save folder not found"):
        run_config_from_save_folder(tmp_path / "nothing")
    with pytest.raises(ForensicsError, match=r"no step\{N\} checkpoint with config.json"):
        run_config_from_save_folder(tmp_path)
    copy = tmp_path / "save"
    shutil.copytree(folder / "save-glob", copy)
    newest = max(copy.glob("step*"), key=lambda p: int(p.name[4:]))
    config = json.loads((newest / "config.json").read_text())
    config["train_module"]["tp_config"] = {"degree": 2}
    (newest / "config.json").write_text(json.dumps(config))
    with pytest.raises(ForensicsError, match="train_module.tp_config is set"):
        run_config_from_save_folder(copy)
    del config["train_module"]["tp_config"]
    del config["data_loader"]["seed"]
    (newest / "config.json").write_text(json.dumps(config))
    with pytest.raises(ForensicsError, match=r"config.json: data_loader.seed is not set"):
        run_config_from_save_folder(copy)
    (newest / "train" / "rank0.pt").unlink()
    config["data_loader"]["seed"] = 17
    (newest / "config.json").write_text(json.dumps(config))
    with pytest.raises(ForensicsError, match="rank0.pt: trainer state not found"):
        run_config_from_save_folder(copy)
    config["dataset"] = [config["dataset"]]  # the composable API's list of instance sources
    (newest / "config.json").write_text(json.dumps(config))
    with pytest.raises(ForensicsError, match="config.json: dataset is a list of instance sources"):
        run_config_from_save_folder(copy)


@pytest.mark.parametrize(
    ("section", "key", "value"),
    [
        ("dataset", "sequence_length", "32"),
        ("dataset", "sequence_length", "thirty-two"),
        ("dataset", "sequence_length", 0),
        ("dataset", "sequence_length", 32.5),
        ("data_loader", "global_batch_size", "256"),
        ("data_loader", "seed", True),
        ("dataset.tokenizer", "vocab_size", "100278"),
    ],
)
def test_a_number_field_of_another_type_is_refused_naming_it(
    trained, tmp_path, section, key, value
):
    """The library's config.json with a number written as a string (or a float, a bool, zero):
    one line naming the file and the field, before any arithmetic on it."""
    folder, _ = trained
    copy = tmp_path / "save"
    shutil.copytree(folder / "save-glob", copy)
    for path in copy.glob("step*/config.json"):
        config = json.loads(path.read_text())
        where = config
        for part in section.split("."):
            where = where[part]
        where[key] = value
        path.write_text(json.dumps(config))
    with pytest.raises(ForensicsError, match=rf"config.json: {section}.{key} is {value!r}"):
        run_config_from_save_folder(copy)


def test_unused_path_fields_leave_the_config_hash_alone(tmp_path):
    """A config that does not use globs, mixes or the permutation hashes the same whether it
    spells their defaults out or not (skip files record the hashes); set, they count."""
    base = {
        "format": "olmo-core",
        "sources": [{"name": "a", "paths": ["a.npy"]}],
        "sequence_length": 8,
        **DOLMA2,
        "global_batch_size": 64,
        "seed": 1,
        "dp_world_size": 1,
    }
    training = {"global_batch_size": 8, "train_iters": 2}

    def hashes(**extra: Any) -> tuple[str, str]:
        raw = {"data": {**base, **extra}, "training": training}
        config = config_from_dict(raw, base_dir=tmp_path, source=None)
        return config.config_hash(), config.order_hash()

    plain = hashes()
    assert hashes(expand_glob=False, generate_doc_lengths=False) == plain
    assert hashes(source_permutation_seed=None) == plain
    assert hashes(source_permutation_seed=3)[1] != plain[1]


def test_rebuild_of_a_mix_run_is_what_the_library_builds(trained):
    """The rebuild of a mix run names its kept files: its rebuilt config (no mix, the source
    permutation kept) replays the order ai2-olmo-core builds from the saved experiment config
    merged with the restart words (the library's Config.merge, prefix `dataset`, as its
    experiment CLI hands overrides down)."""
    from forensics.rebuild.files import FilePlan, rebuilt_data, restart_files
    from forensics.skip.units import FileUnit

    folder, _ = trained
    config = _config(
        folder,
        {
            "mix": MIX,
            "mix_base_dir": "mixbase",
            "mix_file": str(_mix_listing()),
            "tokenizer_identifier": TOKENIZER_ID,
            "source_permutation_seed": 11,
            "seed": 5,
        },
        6,
    )
    replayer = open_replayer(config)
    units = [FileUnit(f.source, str(f.path), f.path, np.zeros(0, np.int64)) for f in replayer.files]
    kept: dict[str, list[Any]] = {}
    for unit in units[1:]:  # the first file of the mix is dropped
        kept.setdefault(unit.dataset, []).append(unit)
    plan = FilePlan(None, "olmo-core", 1, units[:1], kept, [])  # type: ignore[arg-type]
    data = rebuilt_data(config, plan)
    assert "mix" not in data and data["source_permutation_seed"] == 11
    raw = {**config.model_dump(mode="json", exclude_none=True), "data": data}
    rebuilt = open_replayer(config_from_dict(raw, base_dir=folder, source=None))
    words = restart_files(plan, config)["restart-rebuilt.flags"].split()
    assert "--dataset.mix=null" in words
    script = (
        "import json, sys\n"
        "from olmo_core.data import NumpyFSLDatasetConfig\n"
        "saved = json.load(open(sys.argv[1]))['dataset']\n"
        "merged = NumpyFSLDatasetConfig.from_dict(saved).merge(sys.argv[2:], prefix='dataset')\n"
        "paths, _, _ = merged._resolve_paths_metadata(allow_mix=True)\n"
        "print(json.dumps(paths))\n"
    )
    saved = folder / "save-mix" / "step6" / "config.json"
    done = subprocess.run(
        [str(oracle_python()), "-c", script, str(saved), *words],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    library = json.loads(done.stdout.strip().splitlines()[-1])
    assert [str(f.path) for f in rebuilt.stages[0].files] == library
    assert len(library) == len(units) - 1
