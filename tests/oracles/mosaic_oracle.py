"""A real MosaicML streaming run on one simulated node, for the tests: run by the oracle venv
(.venv-mosaic, scripts/mosaic_oracle_env.sh). The parent imports streaming once, then forks one
process per rank with RANK / WORLD_SIZE / LOCAL_WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
MASTER_PORT set as torchrun sets them (StreamingDataset joins them with gloo); forking after the
import saves each rank the ~4 s import of torch and transformers.

    python mosaic_oracle.py SPEC.json RANKS PORT [NODE NODES]

With NODE and NODES, this process is node NODE of NODES (global ranks NODE * RANKS ...); each node
runs in its own process with its own /dev/shm and TMPDIR (forensics_testing/mosaic_support.py
starts it under
`unshare --mount`), as separate machines would, and the nodes meet over gloo on 127.0.0.1.

SPEC: {"streams": [{"local": dir, "proportion"|"repeat"|"choose": ...}, ...],
       "dataset": StreamingDataset keyword arguments (batch_size, shuffle, shuffle_algo, ...),
       "num_workers": int, "drop_last": bool, "epochs": int,
       "stop_after": batches of the first epoch after which to take the loader's state_dict and
                     stop (null: run all epochs), "resume_state": a state_dict to load first,
       "state_after_epochs": take the loader's state_dict after this many whole epochs, and stop,
       "persistent_workers": the DataLoader's (llm-foundry's default is true),
       "out": folder}
Writes OUT/rank<R>.json: {"epochs": [[[uid, ...] per batch] per epoch], "state": state_dict or
null}. The uid column identifies a sample across streams.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from mosaic_import import import_streaming_base  # noqa: E402


def _uids(samples: list[dict]) -> dict[str, list[int]]:
    """A batch as a dict, so StreamingDataLoader counts its samples (dataloader.py:40-51)."""
    return {"uid": [int(s["uid"]) for s in samples]}


def run_rank(spec: dict) -> None:
    """Iterate this rank's StreamingDataLoader as the spec says; write OUT/rank<R>.json."""
    base = import_streaming_base()
    streams = [base.Stream(**s) for s in spec["streams"]]
    dataset = base.StreamingDataset(streams=streams, **spec["dataset"])
    loader = base.StreamingDataLoader(
        dataset,
        batch_size=spec["dataset"]["batch_size"],
        num_workers=spec["num_workers"],
        drop_last=spec["drop_last"],
        collate_fn=_uids,
        persistent_workers=bool(spec.get("persistent_workers")) and spec["num_workers"] > 0,
    )
    if spec.get("resume_state") is not None:
        loader.load_state_dict(spec["resume_state"])
    epochs, state = [], None
    for _ in range(spec["epochs"]):
        batches = []
        for batch in loader:
            batches.append(batch["uid"])
            if spec.get("stop_after") is not None and len(batches) == spec["stop_after"]:
                state = loader.state_dict()
                break
        epochs.append(batches)
        if spec.get("state_after_epochs") == len(epochs):
            state = loader.state_dict()
        if state is not None:
            break
    rank = int(os.environ.get("RANK", 0))
    out = Path(spec["out"]) / f"rank{rank}.json"
    out.write_text(json.dumps({"epochs": epochs, "state": state}))


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    ranks, port = int(sys.argv[2]), sys.argv[3]
    node, nodes = (int(sys.argv[4]), int(sys.argv[5])) if len(sys.argv) > 5 else (0, 1)
    import_streaming_base()
    children = []
    for local in range(ranks):
        pid = os.fork()
        if pid == 0:
            os.environ.update(
                RANK=str(node * ranks + local),
                WORLD_SIZE=str(nodes * ranks),
                LOCAL_WORLD_SIZE=str(ranks),
                LOCAL_RANK=str(local),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            )
            code = 1
            try:
                run_rank(spec)
                code = 0
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        children.append(pid)
    failed = [r for r, pid in enumerate(children) if os.waitpid(pid, 0)[1] != 0]
    if failed:
        sys.exit(f"oracle ranks {failed} failed")


if __name__ == "__main__":
    main()
