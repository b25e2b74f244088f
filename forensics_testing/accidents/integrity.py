"""The accident battery's cases of sets and files that look whole and are not: an output folder a
kill left mid-publish, a manifest with two lines or rows swapped, a tokenizer whose ids are
permuted, and damaged files of the other families (an OLMo-core config.json, MDS streams, Hugging
Face data files), each written into the run copy by its setup."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dataloaders.megatron.indexed import IndexedDataset
from dataloaders.tokenizer import load_tokenizer, special_ids
from forensics.publish_set import publish
from forensics_testing.accidents.case import Accident
from forensics_testing.mosaic_support import write_mds

# -- an output set a kill left half published ------------------------------------------------


class _Killed(BaseException):
    """Stands for the SIGKILL: nothing of the publish runs after it."""


def killed_publish(folder: str, state: str, renames: int = 4) -> Callable[[Path], None]:
    """Republish `folder`'s own set (a copy of it, staged in `state`) through the real publish
    (forensics.publish_set), killed after `renames` renames: the journal and a mixed folder are
    left, as a SIGKILL leaves them."""

    def apply(run: Path) -> None:
        out = run / folder
        staging = out / state / "staging"
        staging.mkdir(parents=True)
        published = [p for p in out.iterdir() if p.is_file() and not p.name.startswith(".")]
        for path in published:
            shutil.copy(path, staging / path.name)
        real, done = os.replace, []

        def rename_or_die(a: Any, b: Any) -> None:
            if len(done) == renames:
                raise _Killed
            done.append(a)
            real(a, b)

        os.replace = rename_or_die  # type: ignore[assignment]
        try:
            publish(staging, out, [p.name for p in published])
        except _Killed:
            pass
        finally:
            os.replace = real  # type: ignore[assignment]

    return apply


def _finished(folder: str, state: str, names: tuple[str, ...]) -> Callable[..., str | None]:
    """The next writer finished the publish, said so, and left the whole set."""

    def check(run: Path, proc: subprocess.CompletedProcess) -> str | None:
        if "killed while publishing" not in proc.stderr:
            return "did not say the folder was left mid-publish"
        if (run / folder / state / "publish.json").exists():
            return "the journal is still there"
        missing = [n for n in names if not (run / folder / n).is_file()]
        return f"missing after the publish: {missing}" if missing else None

    return check


def publish_leftovers(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """A spike and a triage folder left mid-publish: readers refuse it, writers finish it."""
    spike_left = killed_publish("spike", ".cache")
    add(
        Accident(
            "rebuild: the spike folder a kill left mid-publish",
            ["rebuild", "spike", "--config", "forensics.yaml", "--out", "rb"],
            spike_left,
            needle="killed while publishing into it",
            names="spike",
        )
    )
    add(
        Accident(
            "check-skip: a skip file whose folder a kill left mid-publish",
            names["cs"],
            spike_left,
            needle="killed while publishing into it",
            names="spike",
        )
    )
    add(
        Accident(
            "triage --force: over a folder a kill left mid-publish",
            ["triage", names["log"], "--out", "triage", "--force"],
            killed_publish("triage", ".triage", renames=3),
            expect="ok",
            outputs=("triage/*",),
            check=_finished(
                "triage", ".triage", ("events.json", "summary.json", "report.md", "triage.png")
            ),
        )
    )


# -- manifests and tokenizers ----------------------------------------------------------------


def _own_texts(run: Path, prefix: str) -> list[str]:
    """The dataset's documents decoded with the run's tokenizer (its EOD left out): the JSONL
    preprocess_data.py read, as far as the battery can rebuild it."""
    tokenizer = load_tokenizer(run / "tokenizer.json")
    special = special_ids(tokenizer)
    dataset = IndexedDataset(run / prefix)
    texts = []
    for doc in range(dataset.num_documents):
        first, end = int(dataset.document_indices[doc]), int(dataset.document_indices[doc + 1])
        ids = [int(i) for s in range(first, end) for i in dataset[s] if int(i) not in special]
        texts.append(tokenizer.decode(ids, skip_special_tokens=False))
    return texts


def own_jsonl(prefix: str, swap: int | None = None) -> Callable[[Path], None]:
    """docs.jsonl of the dataset's own texts, with lines `swap` and `swap + 1` exchanged."""

    def apply(run: Path) -> None:
        texts = _own_texts(run, prefix)
        if swap is not None:
            texts[swap], texts[swap + 1] = texts[swap + 1], texts[swap]
        lines = [json.dumps({"text": t, "url": f"u{i}"}) + "\n" for i, t in enumerate(texts)]
        (run / "docs.jsonl").write_text("".join(lines))

    return apply


def swap_manifest_rows(manifest: str) -> Callable[[Path], None]:
    """Rows 0 and 1 of the run's manifest exchanged whole (facets and checks)."""

    def apply(run: Path) -> None:
        import polars as pl

        table = pl.read_parquet(run / manifest)
        order = [1, 0, *range(2, table.height)]
        facets = table.drop("doc_id")[order]
        table.select("doc_id").hstack(facets).write_parquet(run / manifest)

    return apply


def permute_tokenizer(run: Path) -> None:
    """tokenizer.json with its ordinary tokens' ids permuted (the same vocabulary size)."""
    import numpy as np

    data = json.loads((run / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    special = {t["content"] for t in data.get("added_tokens", [])}
    names = [n for n in vocab if n not in special]
    ids = np.random.default_rng(5).permutation([vocab[n] for n in names]).tolist()
    data["model"]["vocab"] = {n: vocab[n] for n in vocab if n in special} | dict(
        zip(names, ids, strict=True)
    )
    (run / "tokenizer.json").write_text(json.dumps(data))


def _has_checks(run: Path, proc: subprocess.CompletedProcess) -> str | None:
    import polars as pl

    columns = pl.read_parquet(run / "m.parquet").columns
    wanted = ["doc_id", "url", "doc_tokens", "doc_hash"]
    return None if columns == wanted else f"manifest columns {columns}, not {wanted}"


def manifests_and_tokenizers(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Two JSONL lines swapped, two manifest rows swapped, a permuted tokenizer."""
    first, manifest = names["first"], info["manifest"]
    man = ["manifest", "docs.jsonl", "--fields", "url", "--prefix", first]
    man += ["--tokenizer", "tokenizer.json", "--out", "m.parquet"]
    add(
        Accident(
            "manifest --tokenizer: the dataset's own text",
            man,
            own_jsonl(first),
            expect="ok",
            outputs=("m.parquet",),
            check=_has_checks,
        )
    )
    add(
        Accident(
            "manifest --tokenizer: two adjacent JSONL lines swapped",
            man,
            own_jsonl(first, swap=3),
            needle="line 4 is not document 3 of",
            names="docs.jsonl",
        )
    )
    add(
        Accident(
            "replay: manifest with its first two rows swapped",
            [*names["replay"], "--out", "w.parquet"],
            swap_manifest_rows(manifest),
            needle="its rows are not this dataset's documents in .idx order",
            names=Path(manifest).name,
        )
    )
    add(
        Accident(
            "replay --text: tokenizer.json with its ids permuted",
            [*names["replay"], "--text", "--out", "w.parquet"],
            permute_tokenizer,
            needle="re-encode to their own ids",
            names="tokenizer.json",
        )
    )


# -- other families' damaged files -----------------------------------------------------------


def olmo_core_config(field: str, value: Any) -> Callable[[Path], None]:
    """`olmo/step10/config.json` laid out as OLMo-core's ConfigSaverCallback writes it, with
    `field` (dotted) set to `value`."""

    def apply(run: Path) -> None:
        step = run / "olmo" / "step10"
        (step / "train").mkdir(parents=True)
        tokenizer = {"vocab_size": 100278, "eos_token_id": 100257, "pad_token_id": 100277}
        config = {
            "run_name": "tiny",
            "dataset": {
                "_CLASS_": "olmo_core.data.numpy_dataset.NumpyFSLDatasetConfig",
                "paths": ["data/a.npy"],
                "sequence_length": 2048,
                "tokenizer": tokenizer,
            },
            "data_loader": {
                "_CLASS_": "olmo_core.data.data_loader.NumpyDataLoaderConfig",
                "global_batch_size": 8192,
                "seed": 17,
            },
        }
        where = config
        *path, last = field.split(".")
        for key in path:
            where = where[key]
        where[last] = value
        (step / "config.json").write_text(json.dumps(config))

    return apply


def mds_stream(damage: Callable[[Path], None] | None = None) -> Callable[[Path], None]:
    """`mds/web` (50 samples in shards of 20, 20, 10) and `mds.yaml` reading it, then `damage`
    applied to the stream folder."""

    def apply(run: Path) -> None:
        import yaml

        rows = [{"text": f"page {i}", "uid": i, "source": "web"} for i in range(50)]
        write_mds(run / "mds" / "web", rows, [20, 20, 10])
        data = {"format": "mosaic-streaming", "streams": [{"local": "mds/web"}], "batch_size": 5}
        config = {"data": data, "training": {"global_batch_size": 5, "train_iters": 10}}
        (run / "mds.yaml").write_text(yaml.safe_dump(config))
        if damage is not None:
            damage(run / "mds" / "web")

    return apply


def negative_samples(stream: Path) -> None:
    index = json.loads((stream / "index.json").read_text())
    index["shards"][1]["samples"] = -20
    (stream / "index.json").write_text(json.dumps(index))


def random_offsets(stream: Path) -> None:
    import numpy as np

    shard = stream / "shard.00001.mds"
    data = bytearray(shard.read_bytes())
    table = np.random.default_rng(0).integers(0, len(data), 21).astype("<u4")
    data[4 : 4 + 4 * 21] = table.tobytes()
    shard.write_bytes(bytes(data))


def hf_files(damage: Callable[[Path], None]) -> Callable[[Path], None]:
    """`hf/part-{0,1,2}.parquet` (40 rows each) and `hf.yaml` reading them (map-style), then
    `damage` applied to part-1."""

    def apply(run: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        import yaml

        for s in range(3):
            rows = [{"text": f"doc {40 * s + i}", "uid": 40 * s + i} for i in range(40)]
            pq.write_table(pa.Table.from_pylist(rows), run / "hf" / f"part-{s}.parquet")
        files = [f"hf/part-{s}.parquet" for s in range(3)]
        data = {"format": "hf", "files": files, "seed": 1, "per_device_batch_size": 4}
        config = {"data": data, "training": {"global_batch_size": 4, "train_iters": 20}}
        (run / "hf.yaml").write_text(yaml.safe_dump(config))
        damage(run / "hf" / "part-1.parquet")

    def prepare(run: Path) -> None:
        (run / "hf").mkdir()
        apply(run)

    return prepare


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _other_schema(path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"body": "x", "n": i} for i in range(40)]), path)


def _jsonl(path: Path) -> None:
    path.write_text("".join(json.dumps({"text": "a", "uid": i}) + "\n" for i in range(40)))


def other_families(
    add: Callable[[Accident], None], info: dict[str, Any], names: dict[str, Any]
) -> None:
    """Damaged files of OLMo-core, MosaicML streaming and Hugging Face runs."""
    olmo = ["replay", "--from-checkpoint", "olmo", "--step", "10", "--window", "2"]
    olmo += ["--out", "w.parquet"]
    for field, value in (("dataset.sequence_length", "2048"), ("data_loader.seed", "17")):
        add(
            Accident(
                f"replay --from-checkpoint: OLMo-core config.json with {field} a string",
                olmo,
                olmo_core_config(field, value),
                needle=f"{field} is {value!r}",
                names="config.json",
            )
        )
    mds = ["replay", "--config", "mds.yaml", "--step", "5", "--window", "2", "--text"]
    mds += ["--out", "w.parquet"]
    add(
        Accident(
            "replay: MDS index.json with negative samples",
            mds,
            mds_stream(negative_samples),
            needle="shard 1: samples is -20, not a count",
            names="index.json",
        )
    )
    add(
        Accident(
            "replay --text: MDS shard with a random offsets table",
            mds,
            mds_stream(random_offsets),
            needle="offsets table is not MDS's",
            names="shard.00001.mds",
        )
    )
    add(
        Accident(
            "replay --text: a good MDS stream",
            mds,
            mds_stream(),
            expect="ok",
            outputs=("w.parquet",),
            check=_texts_are("page "),
        )
    )
    hf = ["replay", "--config", "hf.yaml", "--step", "5", "--window", "2", "--out", "w.parquet"]
    damages = [
        ("truncated", _truncated, "not a readable Parquet file"),
        ("empty", lambda p: p.write_bytes(b""), "not a readable Parquet file"),
        ("of another schema", _other_schema, "has columns ['body', 'n'], but"),
        ("a JSONL file named .parquet", _jsonl, "not a readable Parquet file"),
    ]
    for what, damage, needle in damages:
        add(
            Accident(
                f"replay: HF data file {what}",
                hf,
                hf_files(damage),
                needle=needle,
                names="part-1.parquet",
            )
        )


def _texts_are(prefix: str) -> Callable[..., str | None]:
    """Every replayed text starts with `prefix` (the stream's own samples, not stray bytes)."""

    def check(run: Path, proc: subprocess.CompletedProcess) -> str | None:
        import polars as pl

        texts = pl.read_parquet(run / "w.parquet")["text"].to_list()
        bad = [t for t in texts if not str(t).startswith(prefix)]
        return f"{len(bad)} texts are not samples: {bad[:2]!r}" if bad or not texts else None

    return check
