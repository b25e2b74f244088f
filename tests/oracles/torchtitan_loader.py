"""Run torchtitan 0.3.0's own data loaders on CPU and write what they yield (the oracle of the
torchtitan loader family's tests; run by .venv-titan's python, scripts/torchtitan_oracle_env.sh).

Usage: python torchtitan_loader.py JOBS.json OUT.json   ({"jobs": [job, ...]}, one interpreter)

The job names local data files, a tokenizer folder and the loader's settings. Each source is
registered in torchtitan's own dataset table (torchtitan 0.3.0
torchtitan/hf_datasets/text_datasets.py:38-54, `DATASETS`, "Add your dataset here") with the
loader a user writes: `load_dataset(format, data_files=files, split="train", streaming=...)`
and `sample[text_field]` as its sample processor. Then, for every DP rank, torchtitan's
`HuggingFaceTextDataLoader` (:238-289) or `InterleavedHuggingFaceTextDataLoader` (:300-372) is
built with its real `HuggingFaceTokenizer` (components/tokenizer.py:94) and iterated.

With `save`, the ranks run as processes of a gloo group and torchtitan's own `CheckpointManager`
(components/checkpointer/dcp.py:68) saves step-N after N steps (the dataloader state it stores:
components/dataloader.py:140-147); with `resume`, a fresh loader per rank is restored by the same
manager's `load(step)` (dcp.py:476) and its next batches are written. A step takes
`accumulation` batches (torchtitan/trainer.py:885-889, one per gradient accumulation step).

Each result: {"ranks": [[[inputs, labels] per batch] per rank], "resumed": the same after the
resume, or null}.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def _register(job: dict[str, Any]) -> None:
    from datasets import load_dataset
    from torchtitan.hf_datasets import DatasetConfig
    from torchtitan.hf_datasets import text_datasets as td

    for source in job["sources"]:

        def loader(_path: str, source: dict[str, Any] = source) -> Any:
            return load_dataset(
                source["format"],
                data_files=source["files"],
                split="train",
                streaming=source["streaming"],
            )

        field = source.get("text_field", "text")
        td.DATASETS[source["name"]] = DatasetConfig(
            path=source["files"][0], loader=loader, sample_processor=lambda s, f=field: s[f]
        )


def _loader(job: dict[str, Any], rank: int) -> Any:
    from torchtitan.components.tokenizer import HuggingFaceTokenizer
    from torchtitan.hf_datasets import text_datasets as td

    tokenizer = HuggingFaceTokenizer(tokenizer_path=job["tokenizer"])
    common = {
        "dp_world_size": job["dp_world_size"],
        "dp_rank": rank,
        "tokenizer": tokenizer,
        "seq_len": job["seq_len"],
        "local_batch_size": job["batch_size"],
    }
    infinite = job.get("infinite", True)
    if not job.get("interleaved"):
        (source,) = job["sources"]
        config = td.HuggingFaceTextDataLoader.Config(dataset=source["name"], infinite=infinite)
        return td.HuggingFaceTextDataLoader(config, **common)
    sources = [
        td.HFDataSource(dataset=s["name"], infinite=infinite, weight=s.get("weight", 1.0))
        for s in job["sources"]
    ]
    config = td.InterleavedHuggingFaceTextDataLoader.Config(
        sources=sources,
        seed=job.get("seed", 42),
        stopping_strategy=job.get("stopping_strategy", "on_first_exhausted"),
    )
    return td.InterleavedHuggingFaceTextDataLoader(config, **common)


def _take(iterator: Any, n: int) -> list[Any]:
    out = []
    for _ in range(n):
        try:
            inputs, labels = next(iterator)
        except StopIteration:
            break
        out.append([inputs["input"].tolist(), labels.tolist()])
    return out


class _Nothing:
    """The optimizer and scheduler slots of the manager: this oracle saves no model state
    (the dataloader entry is what the tests read)."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


def _manager(job: dict[str, Any], loader: Any, folder: str) -> Any:
    import torch
    from torchtitan.components.checkpoint import CheckpointManager

    config = CheckpointManager.Config(enable=True, folder="checkpoint", interval=1, keep_latest_k=0)
    return CheckpointManager(
        config,
        dataloader=loader,
        model_parts=[torch.nn.Linear(2, 2)],
        optimizers=_Nothing(),
        lr_schedulers=_Nothing(),
        states={"train_state": _Nothing()},
        sd_adapter=None,
        base_folder=folder,
    )


def _rank_main(rank: int, job: dict[str, Any], out_dir: str) -> None:
    """One rank of the gloo group: train `save.after` steps and save; or load and go on."""
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(job["port"]))
    dist.init_process_group("gloo", rank=rank, world_size=job["dp_world_size"])
    _register(job)
    steps = job["accumulation"]
    try:
        save = job["save"]
        loader = _loader(job, rank)
        manager = _manager(job, loader, save["folder"])
        batches = _take(iter(loader), save["after"] * steps)
        manager.save(save["after"])
        manager.close()
        resumed = None
        if "resume" in job:
            resume = job["resume"]
            loader = _loader(job, rank)  # a fresh loader, as a restarted job builds
            manager = _manager(job, loader, save["folder"])
            assert manager.load(step=resume["step"])
            resumed = _take(iter(loader), resume["batches"])
            manager.close()
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as handle:
            json.dump([batches, resumed], handle)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _group(job: dict[str, Any], out_dir: str) -> tuple[list[Any], list[Any] | None]:
    """Every rank as a forked process of one gloo group (forked: torchtitan is imported once,
    in this process): the batches before the save, and those after the resume."""
    import torch.multiprocessing as mp

    job = {**job, "port": _free_port()}
    mp.start_processes(
        _rank_main, args=(job, out_dir), nprocs=job["dp_world_size"], start_method="fork"
    )
    ranks = []
    for rank in range(job["dp_world_size"]):
        with open(os.path.join(out_dir, f"rank{rank}.json")) as handle:
            ranks.append(json.load(handle))
    resumed = [r[1] for r in ranks] if "resume" in job else None
    return [r[0] for r in ranks], resumed


def run_job(job: dict[str, Any], out_dir: str) -> dict[str, Any]:
    """One job's batches per rank (and, with save and resume, the resumed ones)."""
    job = {"accumulation": 1, **job}
    _register(job)
    if "save" in job:
        ranks, resumed = _group(job, out_dir)
    else:
        ranks = [_take(iter(_loader(job, r)), job["batches"]) for r in range(job["dp_world_size"])]
        resumed = None
    return {"ranks": ranks, "resumed": resumed}


def main() -> None:
    """JOBS.json holds {"jobs": [job, ...]}; OUT.json gets {"results": [result, ...]}: one
    interpreter for all, so torchtitan is imported once (the ranks of a save are forked)."""
    job_path, out_path = sys.argv[1], sys.argv[2]
    with open(job_path) as handle:
        jobs = json.load(handle)["jobs"]
    out_dir = os.path.dirname(os.path.abspath(out_path))
    import torchtitan.components.checkpoint  # noqa: F401 - imported before any rank forks
    import torchtitan.hf_datasets.text_datasets  # noqa: F401

    results = [run_job(job, out_dir) for job in jobs]
    with open(out_path, "w") as handle:
        json.dump({"results": results}, handle)


if __name__ == "__main__":
    main()
