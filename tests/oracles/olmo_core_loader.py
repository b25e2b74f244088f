"""Iterate OLMo-core's own data loader and write what it yields (runs in .venv-olmo, not ours).

Usage: python olmo_core_loader.py JOBS.json OUT.json   ({"jobs": [spec, ...]}, one interpreter)

The training loop is the trainer's (olmo_core/train/trainer.py `_fit_epoch` / `fit`): per epoch
`reshuffle(epoch)`, iterate, `global_step += 1` per batch, stop at `max_steps`, then `reset()`
and the next epoch. Every DP rank is its own NumpyFSLDataLoader (dp_rank / dp_world_size), as
in a distributed job. With "restart": {"after": k, "paths": [...]}, every rank's state_dict()
after k steps is restored (load_state_dict) into a fresh job that runs on, over "paths" when
given (then with ignore_fingerprint_mismatch: the library's way to restart on changed data).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np
from olmo_core.data import DataCollator, NumpyDataLoaderBase, NumpyFSLDataset
from olmo_core.data.numpy_dataset import InstanceFilterConfig


def build_dataset(spec: dict[str, Any]) -> NumpyFSLDataset:
    flt = spec.get("instance_filter")
    ds = NumpyFSLDataset(
        *spec["paths"],
        sequence_length=spec["sequence_length"],
        pad_token_id=spec["pad_token_id"],
        eos_token_id=spec["eos_token_id"],
        vocab_size=spec["vocab_size"],
        dtype=getattr(np, spec["dtype"]),
        bos_token_id=spec.get("bos_token_id"),
        max_target_sequence_length=spec.get("max_target_sequence_length"),
        instance_filter_config=InstanceFilterConfig(**flt) if flt else None,
    )
    ds.work_dir = spec["work_dir"]
    ds.prepare()
    return ds


def run_rank(ds: NumpyFSLDataset, spec: dict[str, Any], rank: int) -> dict[str, Any]:
    loader = NumpyDataLoaderBase.wrap_numpy_dataset(
        ds,
        global_batch_size=spec["global_batch_size"],
        collator=DataCollator(pad_token_id=spec["pad_token_id"]),
        work_dir=spec["work_dir"],
        seed=spec["seed"],
        dp_world_size=spec["world_size"],
        dp_rank=rank,
        fs_local_rank=0,
        num_workers=spec.get("num_workers", 0),
        num_threads=spec.get("num_threads"),
        ignore_fingerprint_mismatch=spec.get("ignore_fingerprint_mismatch", False),
    )
    step, epoch = 0, 1
    if spec.get("resume") is not None:
        state = spec["resume"][rank]
        loader.load_state_dict(state)
        step = spec["resume_step"]
        epoch = state["epoch"]
    steps: list[dict[str, Any]] = []
    state_after = None
    while step < spec["max_steps"]:
        loader.reshuffle(epoch)
        for batch in loader:
            step += 1
            steps.append(
                {
                    "step": step,
                    "epoch": epoch,
                    "index": batch["index"].tolist(),
                    "input_ids": batch["input_ids"].tolist(),
                    "instance_mask": batch["instance_mask"].tolist()
                    if "instance_mask" in batch
                    else None,
                }
            )
            if spec.get("restart") and step == spec["restart"]["after"]:
                state_after = loader.state_dict()
            if step >= spec["max_steps"]:
                break
        else:
            epoch += 1
            loader.reset()
    return {"steps": steps, "state": state_after, "batches_per_epoch": loader.total_batches}


def filter_job(spec: dict[str, Any]) -> dict[str, Any]:
    """The library's own instance filter (NumpyDatasetBase._validate_instance) on raw arrays."""
    import torch

    flt = InstanceFilterConfig(**spec["instance_filter"])
    ds = NumpyFSLDataset(
        __file__, sequence_length=1, pad_token_id=1, eos_token_id=0, vocab_size=1000
    )  # only for its _validate_instance method; the path is never read
    valid = [ds._validate_instance(torch.tensor(a), flt) for a in spec["filter_arrays"]]
    return {"valid": valid}


def run_job(spec: dict[str, Any]) -> dict[str, Any]:
    if "filter_arrays" in spec:
        return filter_job(spec)
    ds = build_dataset(spec)
    out: dict[str, Any] = {
        "fingerprint": ds.fingerprint,
        "fingerprint_version": ds.fingerprint_version,
        "size": len(ds),
        "ranks": [run_rank(ds, spec, r) for r in range(spec["world_size"])],
    }
    restart = spec.get("restart")
    if restart is not None:  # a fresh job restored from the state after `after` steps
        again = {
            **spec,
            "resume": [r["state"] for r in out["ranks"]],
            "resume_step": restart["after"],
            "paths": restart.get("paths") or spec["paths"],
            "ignore_fingerprint_mismatch": bool(restart.get("paths")),
        }
        out["resumed"] = run_job({**again, "restart": None})
    return out


def main() -> None:
    jobs = json.loads(open(sys.argv[1]).read())["jobs"]
    with open(sys.argv[2], "w") as handle:
        json.dump({"results": [run_job(job) for job in jobs]}, handle)
    # The results are on disk: leave without the interpreter's teardown, where a native thread
    # still joinable (the S3 clients' or torch's pools) can abort the process ("terminate called
    # without an active exception") after everything asked of it is done.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
