"""Make a real OLMo-core checkpoint directory and run AI2's dump_training_batch.py on it (runs in
.venv-olmo).

Usage: python olmo_core_dump.py SPEC.json OUT.json

The checkpoint is what an OLMo-core training job writes and the script reads: config.json
(`as_config_dict()` of the NumpyFSLDatasetConfig over a named DataMix, and of the
NumpyDataLoaderConfig), data_paths.txt and train/rank0.pt (the trainer state with the
data-loader `state_dict()` after `state_after` steps of a DP-rank-0 loader). The script runs as
__main__ (runpy, one interpreter) for every step in `steps`; its pickled batches are written out.
"""

from __future__ import annotations

import json
import pickle
import runpy
import sys
from pathlib import Path

import torch
from olmo_core.data import (
    DataCollator,
    NumpyDataLoaderBase,
    NumpyDataLoaderConfig,
    NumpyFSLDatasetConfig,
    TokenizerConfig,
)
from olmo_core.data.mixes import DataMix

SCRIPT = Path(__file__).resolve().parent / "upstream" / "dump_training_batch.py"


def main() -> None:
    spec = json.loads(open(sys.argv[1]).read())
    result_path = sys.argv[2]
    ckpt = Path(spec["checkpoint"])
    tokenizer = TokenizerConfig(
        vocab_size=spec["vocab_size"],
        eos_token_id=spec["eos_token_id"],
        pad_token_id=spec["pad_token_id"],
        identifier=spec["tokenizer_id"],
    )
    dataset_config = NumpyFSLDatasetConfig(
        mix=DataMix(spec["mix"]),
        mix_base_dir=spec["mix_base_dir"],
        tokenizer=tokenizer,
        sequence_length=spec["sequence_length"],
        work_dir=spec["work_dir"],
    )
    loader_config = NumpyDataLoaderConfig(
        global_batch_size=spec["global_batch_size"], seed=spec["seed"]
    )
    dataset = dataset_config.build()
    dataset.prepare()
    loader = NumpyDataLoaderBase.wrap_numpy_dataset(
        dataset,
        global_batch_size=spec["global_batch_size"],
        collator=DataCollator(pad_token_id=spec["pad_token_id"]),
        work_dir=spec["work_dir"],
        seed=spec["seed"],
        dp_world_size=spec["world_size"],
        dp_rank=0,
        fs_local_rank=0,
    )
    step, epoch = 0, 1
    while step < spec["state_after"]:
        loader.reshuffle(epoch)
        for _ in loader:
            step += 1
            if step == spec["state_after"]:
                break
        else:
            epoch += 1
            loader.reset()
    (ckpt / "train").mkdir(parents=True, exist_ok=True)
    state = loader.state_dict()
    torch.save({"global_step": step, "epoch": epoch, "data_loader": state}, ckpt / "train/rank0.pt")
    config = {
        "dataset": dataset_config.as_config_dict(),
        "data_loader": loader_config.as_config_dict(),
    }
    (ckpt / "config.json").write_text(json.dumps(config))
    (ckpt / "data_paths.txt").write_text("\n".join(str(p) for p in dataset.paths) + "\n")
    dumps = {}
    for s in spec["steps"]:
        out = ckpt / f"batch-{s}.pkl"
        argv = [str(SCRIPT), "--checkpoint", str(ckpt), "--step", str(s)]
        sys.argv = argv + ["--output", str(out), "--work-dir", spec["dump_work_dir"]]
        runpy.run_path(str(SCRIPT), run_name="__main__")  # its main(), as `python script ...`
        with open(out, "rb") as handle:
            batch = pickle.load(handle)
        dumps[s] = {"index": batch["index"].tolist(), "input_ids": batch["input_ids"].tolist()}
    import olmo_core.version

    versions = {"torch": torch.__version__, "olmo_core": olmo_core.version.VERSION}
    json.dump(
        {
            "state": state,
            "paths": [str(p) for p in dataset.paths],
            "dumps": dumps,
            "versions": versions,
        },
        open(result_path, "w"),
    )


if __name__ == "__main__":
    main()
