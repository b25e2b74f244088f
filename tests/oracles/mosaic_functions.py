"""Call mosaicml-streaming's own ordering functions on a list of cases (run by the oracle venv).

    python mosaic_functions.py CASES.json    -> writes results.json beside it

A case: {"fn": "shuffle", "algo", "sizes", "ncn", "seed", "epoch", "block"} |
        {"fn": "partition", "algo", "n", "ncn", "nodes", "ranks", "workers", "batch", "drop",
         "ipn"} | {"fn": "sampling", "sizes", "choose", "gran", "seed", "epoch", "use_epoch"} |
        {"fn": "abbrev", "value"} (util.number_abbrev_to_int) |
        {"fn": "signature"} (StreamingDataset.__init__'s keyword defaults) |
        {"fn": "write", "out", "rows", "columns", "compression", "size_limit"} (MDSWriter) |
        {"fn": "replicate", "nodes", "ranks", "workers", "r"} (World.replicate, every rank)
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from mosaic_import import import_streaming_base  # noqa: E402


def _abbrev(case: dict) -> dict:
    from streaming.base.util import number_abbrev_to_int

    return {"value": number_abbrev_to_int(case["value"])}


def _signature(case: dict) -> dict:
    import inspect

    from streaming.base import StreamingDataset
    from torch.utils.data import DataLoader

    params = inspect.signature(StreamingDataset.__init__).parameters.values()
    out = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    loader = inspect.signature(DataLoader.__init__).parameters
    out["num_workers"], out["drop_last"] = (loader[k].default for k in ("num_workers", "drop_last"))
    return out


def _write(case: dict) -> dict:
    from streaming.base import MDSWriter

    with MDSWriter(
        out=case["out"], columns=case["columns"], compression=case["compression"],
        size_limit=case["size_limit"],
    ) as writer:  # fmt: skip
        for row in case["rows"]:
            writer.write(row)
    return {}


def _replicate(case: dict) -> dict:
    from streaming.base.world import World

    nodes, ranks, workers, replication = (case[k] for k in ("nodes", "ranks", "workers", "r"))
    out = []
    for rank in range(nodes * ranks):
        world = World(nodes, ranks, workers, rank * workers).replicate(replication)
        out.append([world.num_nodes, world.ranks_per_node, world.node, world.rank_of_node])
    return {"worlds": out}


OTHER = {"abbrev": _abbrev, "signature": _signature, "write": _write, "replicate": _replicate}


def main() -> None:
    import_streaming_base()
    from streaming.base.partition import get_partitions
    from streaming.base.sampling import get_sampling
    from streaming.base.shuffle import get_shuffle

    path = Path(sys.argv[1])
    results = []
    warnings.simplefilter("ignore")
    for c in json.loads(path.read_text()):
        try:
            if c["fn"] in OTHER:
                results.append(OTHER[c["fn"]](c))
                continue
            if c["fn"] == "shuffle":
                sizes = np.array(c["sizes"], np.int64)
                out = get_shuffle(c["algo"], sizes, c["ncn"], c["seed"], c["epoch"], c["block"])
            elif c["fn"] == "partition":
                out = get_partitions(
                    c["algo"], c["n"], c["ncn"], c["nodes"], c["ranks"], c["workers"],
                    c["batch"], c["drop"], c["ipn"],
                )  # fmt: skip
            else:
                sizes = np.array(c["sizes"], np.int64)
                out = get_sampling(
                    sizes, c["choose"], c["gran"], c["seed"], c["epoch"], c["use_epoch"]
                )
            results.append({"shape": list(out.shape), "values": out.reshape(-1).tolist()})
        except Exception as err:  # the library refusing a case is part of its behaviour
            results.append({"error": type(err).__name__})
    (path.parent / "results.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main()
