"""The torchtitan family without its oracle: the config's refusals, the saved loader state read
through the safe pickle loader (and refused when it names code), and the family's answers to
the rebuild (files, rebuilt data, restart file), documents and token ids.

The checkpoints here are written with `torch.distributed.checkpoint.save` of exactly the entry
torchtitan's CheckpointManager saves for the dataloader (torchtitan 0.3.0
components/dataloader.py:140-147: {"dp_rank_<r>": pickle.dumps(state), "world_size": W} under
"dataloader", components/checkpointer/dcp.py:151-158); the ones torchtitan itself writes are read
in test_torchtitan_oracle.py.
"""

from __future__ import annotations

import pickle
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from dataloaders.errors import ForensicsError
from dataloaders.families import get_family
from dataloaders.family_base import KeptFiles
from dataloaders.run_config import load_config
from dataloaders.torchtitan import cache, order, recognises_save, resume_entry, saved_loader_state
from dataloaders.torchtitan.state import read_loader_states
from dataloaders.torchtitan.tokens import TitanTokenizer
from forensics_testing.torchtitan_run import load, write_jsonl, write_tokenizer


def _config(tmp_path: Path, **data: Any) -> Path:
    files = write_jsonl(tmp_path / "a", "a", 2, 6, seed=4)
    section = {
        "format": "torchtitan",
        "sources": [{"name": "a", "files": files}],
        "seq_len": 8,
        "local_batch_size": 2,
        "dp_world_size": 2,
        **data,
    }
    raw = {
        "data": section,
        "training": {"global_batch_size": 4, "train_iters": 5},
        "tokenizer": str(write_tokenizer(tmp_path / "tok")),
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"pipeline": "grain"}, "in no torchtitan release (0.3.0 is the newest)"),
        ({"num_workers": 2}, "does not split its data between DataLoader workers"),
        ({"local_batch_size": 3}, "not a multiple of data.local_batch_size x data.dp_world_size"),
    ],
)
def test_config_refusals(tmp_path: Path, data: dict[str, Any], says: str) -> None:
    with pytest.raises(ForensicsError, match=re.escape(says)):
        load_config(_config(tmp_path, **data))


def test_two_sources_need_the_interleaved_loader(tmp_path: Path) -> None:
    raw = yaml.safe_load(_config(tmp_path).read_text())
    raw["data"]["sources"].append({"name": "b", "files": raw["data"]["sources"][0]["files"]})
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(raw))
    with pytest.raises(ForensicsError, match="set data.interleaved: true"):
        load_config(tmp_path / "run.yaml")


def _save(folder: Path, entry: dict[str, Any]) -> Path:
    """A step folder holding `entry` as the checkpoint's dataloader entry (DCP, one process)."""
    import torch.distributed.checkpoint as dcp

    step = folder / "checkpoint" / "step-2"
    with warnings.catch_warnings():  # "assuming ... a single process": intended
        warnings.simplefilter("ignore")
        dcp.save({"dataloader": entry}, checkpoint_id=str(step), no_dist=True)
    return step


class _Runs:
    """Pickles as a call of os.system: what a loader state must never hold."""

    def __reduce__(self) -> Any:
        import os

        return (os.system, ("true",))


def test_loader_state_naming_code_is_refused(tmp_path: Path) -> None:
    """The inner pickle is read by the allow-list unpickler: a global is refused in one line
    naming the checkpoint, the entry and the global, before anything runs."""
    evil = pickle.dumps({"dataset_state": {"inputs_buffer": [], "x": _Runs()}})
    step = _save(tmp_path, {"dp_rank_0": evil, "world_size": 1})
    with pytest.raises(ForensicsError) as err:
        read_loader_states(step)
    message = str(err.value)
    assert "dataloader.dp_rank_0" in message and "posix.system" in message
    assert "\n" not in message and str(step) in message


def test_state_saved_as_torchtitan_saves_it(tmp_path: Path) -> None:
    """Two ranks' map-style states, read back from the save folder by the hook."""
    states = [
        {"dataset_state": {"inputs_buffer": [5, 6], "labels_buffer": [6, 2],
                           "positions_buffer": [3, 4], "sample_idx": 3, "epoch": 1},
         "_num_yielded": 2},
        {"dataset_state": {"inputs_buffer": [], "labels_buffer": [], "positions_buffer": [],
                           "sample_idx": 6, "epoch": 0}, "_num_yielded": 2},
    ]  # fmt: skip
    entry = {f"dp_rank_{r}": pickle.dumps(s) for r, s in enumerate(states)}
    _save(tmp_path, {**entry, "world_size": 2})
    assert recognises_save(tmp_path) and not recognises_save(tmp_path / "checkpoint" / "nothing")
    step, ranks = saved_loader_state(tmp_path)
    assert step == 2
    assert [(r.sources[0].sample_idx, r.sources[0].epoch) for r in ranks] == [(3, 1), (6, 0)]
    assert ranks[0].sources[0].inputs_buffer == [5, 6] and ranks[1].batches_yielded == 2
    with pytest.raises(ForensicsError, match="no step-7 checkpoint"):
        saved_loader_state(tmp_path, 7)
    folder = tmp_path / "checkpoint" / "step-2"
    assert resume_entry(tmp_path) == {"iteration": 2, "checkpoint": str(folder)}


def test_a_buffer_that_is_not_the_documents_is_refused(tmp_path: Path) -> None:
    """A resume whose saved buffer is not the tail of the documents it says were read (another
    tokenizer or other files) is refused, not replayed from a guess."""
    dataset = {"inputs_buffer": [59, 59, 59], "labels_buffer": [59, 59, 59],
               "positions_buffer": [0, 1, 2], "sample_idx": 2, "epoch": 0}  # fmt: skip
    raw = pickle.dumps({"dataset_state": dataset})
    step = _save(tmp_path, {"dp_rank_0": raw, "dp_rank_1": raw, "world_size": 2})
    replayer = load(_config(tmp_path, resumes=[{"iteration": 2, "checkpoint": str(step)}]))
    with pytest.raises(ForensicsError, match="is not the tail of the documents"):
        replayer.replay(1, 3)


def test_family_answers_for_rebuild_and_documents(tmp_path: Path) -> None:
    """The family is file-based: every file with its documents; the rebuilt data keep the
    remaining files; the restart file is each source's list; documents and ids decode."""
    path = _config(tmp_path)
    config = load_config(path)
    family = get_family("torchtitan")
    replayer = family.open(config)
    units = family.file_units(config, replayer)
    assert [u.key for u in units] == ["a-0.jsonl", "a-1.jsonl"]
    assert [len(u.doc_ids) for u in units] == [6, 6]
    assert family.file_refusal(config, replayer) is None
    kept = KeptFiles({"a": units[1:]}, [], {})
    data = family.rebuilt_data(config, kept)
    assert data["sources"][0]["files"] == [str(units[1].path)]
    assert family.restart_files(config, kept) == {
        "data_files.json": '{\n "a": [\n  "' + str(units[1].path) + '"\n ]\n}\n'
    }
    table = replayer.replay(1, 2, text=True)
    docs = table.select("dataset", "doc_id").unique()
    texts = replayer.documents(docs)
    assert texts["text"].null_count() == 0 and set(texts["file"]) <= {"a-0.jsonl", "a-1.jsonl"}
    ids = replayer.document_tokens(docs)
    assert all(i[0] == 1 and i[-1] == 2 for i in ids)  # <bos> ... <eos>, as torchtitan encodes
    # what the spike's token rules ask of a family with document_token_ids
    tokenizer = replayer.tokenizer()
    assert hasattr(tokenizer, "decode_batch")
    assert max(int(i.max()) for i in ids) < replayer.vocab_size()
    assert replayer.blend_shares(0) == ({"a": 1.0}, "source weights")


def test_token_counts_are_cached_by_what_they_depend_on(tmp_path: Path) -> None:
    """The counts are kept on disk; another tokenizer_config.json (special tokens) misses."""
    replayer = load(_config(tmp_path))
    source, tok = replayer.sources[0], replayer.titan_tokenizer
    counts = source.token_inputs(tok)
    key = cache.inputs_key(source, tok)
    assert (cache.load_inputs(key, source.n_docs) == counts).all()
    (tmp_path / "tok" / "tokenizer_config.json").write_text('{"eos_token": "<eos>"}')
    other = TitanTokenizer(tmp_path / "tok")
    assert cache.inputs_key(source, other) != key
    assert (source.token_inputs(other) == counts - 1).all()  # no <bos> now


@pytest.mark.parametrize(
    ("n", "world", "rank", "epoch"), [(7, 1, 0, 1), (50, 3, 2, 2), (3, 2, 1, 5)]
)
def test_reshuffle_is_the_librarys(n: int, world: int, rank: int, epoch: int) -> None:
    """A map-style re-loop's order equals `datasets`' own split_dataset_by_node +
    Dataset.shuffle(seed=42 + epoch) (torchtitan text_datasets.py:95, 179-181)."""
    import numpy as np
    from datasets import Dataset
    from datasets.distributed import split_dataset_by_node

    ids = order.split_ids(order.map_style_split(order.map_style_index(n), rank, world))
    real = split_dataset_by_node(Dataset.from_dict({"i": np.arange(n)}), rank, world)
    assert ids.tolist() == real["i"][:]
    shuffled = real.shuffle(seed=42 + epoch, keep_in_memory=True)["i"][:]
    assert order.map_style_epoch(ids, epoch).tolist() == list(shuffled)


def test_from_checkpoint_on_a_torchtitan_save_names_the_resume(tmp_path: Path) -> None:
    """--from-checkpoint on a torchtitan save: the family claims it (no other does) and refuses
    in one line, giving the data.resumes entry the save supplies (it names no data files)."""
    from forensics.from_checkpoint import config_from_checkpoint, families_saving

    state = {"dataset_state": {"inputs_buffer": [], "labels_buffer": [], "positions_buffer": [],
                               "sample_idx": 6, "epoch": 0}, "_num_yielded": 2}  # fmt: skip
    _save(tmp_path, {"dp_rank_0": pickle.dumps(state), "world_size": 1})
    assert [f.name for f in families_saving(tmp_path)] == ["torchtitan"]
    with pytest.raises(ForensicsError) as err:
        config_from_checkpoint(tmp_path, None, lambda _: None)
    message = str(err.value)
    assert "\n" not in message and "names no data files" in message
    assert f"checkpoint: {tmp_path / 'checkpoint' / 'step-2'}" in message
