"""Property-based tests (hypothesis): every reader of user input answers a damaged or hostile
input with a result or a one-line ForensicsError, never another exception, and never with
silently wrong data.

Readers covered: the `.idx` reader (random corruptions of a real small index), the training-log
readers and the triage after them (Megatron stdout, JSONL, CSV, trainer_state.json, TensorBoard
records), the manifest builder and the replay's manifest reader, the run-config loader, and
check-skip on a hand-edited skip.json. Settings are small (deadline off, <= 100 examples) so the
suite stays fast on CI's two cores.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dataloaders.megatron.indexed import IndexedDataset, write_indexed_dataset
from forensics.errors import ForensicsError

FAST = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples on every run and worker: a failure reproduces
)


def one_line(err: ForensicsError) -> str:
    """A refusal is one non-empty line."""
    text = str(err)
    assert text and "\n" not in text.strip(), text
    return text


def refused_or(fn: Callable[[], Any]) -> Any:
    """fn()'s result, or None when it raised a one-line ForensicsError (anything else fails)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    except ForensicsError as err:
        one_line(err)
        return None


# -- the .idx reader ----------------------------------------------------------------------


def _documents(ds: IndexedDataset) -> list[bytes]:
    """Every document's bytes (its sequences concatenated), as the replay reads them."""
    out = []
    for d in range(ds.num_documents):
        first, last = int(ds.document_indices[d]), int(ds.document_indices[d + 1])
        out.append(b"".join(ds.get(s).tobytes() for s in range(first, last)))
    return out


def _real_index(folder: Path, dtype: Any) -> tuple[Path, list[bytes]]:
    rng = np.random.default_rng(5)
    docs = [rng.integers(0, 30000, size=int(n)).astype(dtype) for n in rng.integers(1, 40, 12)]
    prefix = write_indexed_dataset(folder / "d", docs, dtype)
    return Path(prefix), _documents(IndexedDataset(prefix))


MUTATIONS = st.one_of(
    st.tuples(st.just("byte"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("bit"), st.integers(0, 10_000), st.integers(0, 7)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("append"), st.integers(1, 64), st.integers(0, 255)),
    st.tuples(st.just("int64"), st.integers(0, 10_000), st.integers(-(2**40), 2**40)),
    st.tuples(st.just("bin"), st.integers(-8, 8), st.just(0)),
)


def _mutate(data: bytearray, binary: bytearray, kind: str, at: int, value: int) -> None:
    if kind == "bin":  # the .bin shorter or longer
        if value < 0:
            del binary[len(binary) + value :]
        else:
            binary.extend(b"\0" * value)
        return
    if not data and kind in ("byte", "bit"):
        return  # an earlier mutation truncated it all: no byte left to damage
    at %= max(len(data), 1)
    if kind == "byte":
        data[at] = value
    elif kind == "bit":
        data[at] ^= 1 << value
    elif kind == "truncate":
        del data[at:]
    elif kind == "append":
        data.extend(bytes([value]) * at)
    elif kind == "int64":
        at -= at % 8
        data[at : at + 8] = int(value).to_bytes(8, "little", signed=True)[: len(data) - at]


@FAST
@given(
    dtype=st.sampled_from([np.uint16, np.int32]),
    mutations=st.lists(MUTATIONS, min_size=1, max_size=3),
)
def test_a_damaged_idx_is_refused_or_reads_the_same_documents(dtype: Any, mutations: list) -> None:
    """Refused in one line, or every document holds the same bytes as before. One exception,
    stated: a middle document boundary moved to another valid, ordered position describes
    another valid split of the same sequences (no reader can tell); the content hash
    (`idx_digest`) then differs, which the caches and check-skip compare."""
    with tempfile.TemporaryDirectory() as tmp:
        prefix, original = _real_index(Path(tmp), dtype)
        idx, binf = Path(f"{prefix}.idx"), Path(f"{prefix}.bin")
        before_digest = IndexedDataset(prefix).idx_digest()
        data, binary = bytearray(idx.read_bytes()), bytearray(binf.read_bytes())
        for kind, at, value in mutations:
            _mutate(data, binary, kind, at, value)
        idx.write_bytes(bytes(data))
        binf.write_bytes(bytes(binary))
        ds = refused_or(lambda: IndexedDataset(prefix))
        if ds is None:
            return
        docs = refused_or(lambda: _documents(ds))
        if docs is None or docs == original:
            return
        # Same bytes in the same order, other boundaries: only the document index moved.
        assert b"".join(docs) == b"".join(original)
        assert ds.sequence_count == 12 and ds.idx_digest() != before_digest


def test_a_short_shuffle_index_in_megatrons_cache_is_one_line(
    tmp_path: Path, small_run: Path
) -> None:
    """A shortened or truncated `shuffle_index.npy` in --data-cache-path: refused by name
    before the replay indexes past its end (it was an IndexError traceback)."""
    from dataloaders.run_config import load_config
    from forensics.replay import open_replayer

    run = tmp_path / "run"
    shutil.copytree(small_run, run, ignore=shutil.ignore_patterns("spike"))
    config = load_config(run / "forensics.yaml")
    # Megatron's layout, written from the arrays the replay builds for the first dataset.
    source = open_replayer(config).stage(0).sources[0]
    cache = tmp_path / "data-cache"
    cache.mkdir()
    base = cache / "abc-GPTDataset-train-"
    Path(f"{base}description.txt").write_text(json.dumps(source.description))
    np.save(f"{base}document_index.npy", np.asarray(source.document_index))
    np.save(f"{base}sample_index.npy", source.full_sample_index())
    np.save(f"{base}shuffle_index.npy", np.asarray(source.shuffle_index))
    shuffle = np.load(f"{base}shuffle_index.npy")
    np.save(f"{base}shuffle_index.npy", shuffle[: len(shuffle) // 2])
    text = (run / "forensics.yaml").read_text()
    (run / "forensics.yaml").write_text(
        text.replace("data:\n", f"data:\n  cache_path: {cache}\n", 1)
    )
    with pytest.raises(ForensicsError) as err:
        open_replayer(load_config(run / "forensics.yaml")).replay(10, 20, progress=False)
    message = one_line(err.value)
    assert "damaged" in message and "shuffle_index has" in message, message
    # truncated in the middle of the file (np.load fails): also one line naming the file
    raw = Path(f"{base}shuffle_index.npy").read_bytes()
    Path(f"{base}shuffle_index.npy").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ForensicsError, match="shuffle_index.npy"):
        open_replayer(load_config(run / "forensics.yaml")).replay(10, 20, progress=False)


# -- log readers -----------------------------------------------------------------------------

NUMBER = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.integers(-(10**20), 10**20),
    st.sampled_from(["nan", "-nan", "inf", "NaN", "1e999", "", "x", "0x10", "1,5", "--"]),
)
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


@st.composite
def megatron_logs(draw: st.DrawFn) -> str:
    """Megatron-style lines with arbitrary values, plus arbitrary other lines."""
    lines = []
    steps = draw(st.lists(st.integers(-3, 10**7), min_size=0, max_size=40))
    for step in steps:
        fields = {
            "consumed samples": draw(NUMBER),
            "elapsed time per iteration (ms)": draw(NUMBER),
            "learning rate": draw(NUMBER),
            "global batch size": draw(NUMBER),
            draw(st.sampled_from(["lm loss", "lm loss web", "loss/$x", "loss/:book:"])): draw(
                NUMBER
            ),
            "loss scale": draw(NUMBER),
            "grad norm": draw(NUMBER),
            "number of skipped iterations": draw(NUMBER),
            "number of nan iterations": draw(NUMBER),
        }
        keep = draw(st.lists(st.sampled_from(sorted(fields)), unique=True, max_size=len(fields)))
        body = " | ".join(f"{k}: {fields[k]}" for k in keep)
        lines.append(f" iteration {step:>8}/ {draw(NUMBER)} | {body} |")
        if draw(st.booleans()):
            lines.append(draw(TEXT))
    return "\n".join(lines) + draw(st.sampled_from(["", "\n", "\n iteration 5/"]))


def _triage_survives(path: Path, fmt: str) -> None:
    from forensics.triage.analyze import triage
    from forensics.triage.readers import read_log

    table = refused_or(lambda: read_log(path, fmt))
    if table is None:
        return
    assert isinstance(table, pl.DataFrame)
    refused_or(lambda: triage(table))


@FAST
@given(text=megatron_logs())
def test_megatron_logs_are_read_or_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "train.log"
    path.write_text(text, encoding="utf-8")
    _triage_survives(path, "auto")
    _triage_survives(path, "megatron")


JSON_VALUE = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBER, TEXT),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)
KEYS = st.sampled_from(
    ["step", "iteration", "loss", "lm loss", "grad_norm", "lr", "loss/web", "_step"]
)


@FAST
@given(
    rows=st.lists(
        st.one_of(st.dictionaries(KEYS, JSON_VALUE, max_size=5), TEXT, JSON_VALUE), max_size=30
    )
)
def test_jsonl_logs_are_read_or_refused(tmp_path: Path, rows: list) -> None:
    path = tmp_path / "log.jsonl"
    lines = [r if isinstance(r, str) else json.dumps(r, allow_nan=True) for r in rows]
    path.write_text("\n".join(lines), encoding="utf-8")
    _triage_survives(path, "jsonl")


@FAST
@given(
    header=st.lists(st.one_of(KEYS, TEXT), min_size=1, max_size=5),
    rows=st.lists(st.lists(NUMBER.map(str), min_size=0, max_size=6), max_size=30),
)
def test_csv_logs_are_read_or_refused(tmp_path: Path, header: list, rows: list) -> None:
    path = tmp_path / "log.csv"
    path.write_text("\n".join([",".join(header)] + [",".join(r) for r in rows]), encoding="utf-8")
    _triage_survives(path, "csv")
    _triage_survives(path, "wandb-csv")


@FAST
@given(
    state=st.one_of(
        JSON_VALUE,
        st.fixed_dictionaries(
            {"log_history": st.lists(st.dictionaries(KEYS, JSON_VALUE, max_size=4), max_size=20)}
        ),
    )
)
def test_trainer_state_is_read_or_refused(tmp_path: Path, state: Any) -> None:
    path = tmp_path / "trainer_state.json"
    path.write_text(json.dumps(state, allow_nan=True), encoding="utf-8")
    _triage_survives(path, "hf-trainer-state")


@pytest.fixture(scope="module")
def event_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real TensorBoard event file of 60 steps (loss, grad norm, lr)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.record_writer import RecordWriter

    path = tmp_path_factory.mktemp("tb") / "events.out.tfevents.1.host"
    with open(path, "wb") as stream:
        writer = RecordWriter(stream)
        for step in range(1, 61):
            for tag, value in (("lm loss", 3 + 1 / step), ("grad-norm", 1.0), ("lr", 1e-4)):
                summary = summary_pb2.Summary(
                    value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)]
                )
                event = event_pb2.Event(step=step, wall_time=float(step), summary=summary)
                writer.write(event.SerializeToString())
        writer.flush()
    return path.read_bytes()


@FAST
@given(mutations=st.lists(MUTATIONS, min_size=1, max_size=4))
def test_damaged_tensorboard_files_are_read_or_refused(
    tmp_path: Path, event_file: bytes, mutations: list
) -> None:
    data, unused = bytearray(event_file), bytearray()
    for kind, at, value in mutations:
        _mutate(data, unused, kind, at * 3, value)
    folder = tmp_path / "tb"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    path = folder / "events.out.tfevents.1.host"
    path.write_bytes(bytes(data))
    _triage_survives(path, "tensorboard")
    _triage_survives(folder, "auto")


# -- manifests -------------------------------------------------------------------------------


@FAST
@given(
    lines=st.lists(
        st.one_of(
            st.dictionaries(st.sampled_from(["text", "url", "source", "id"]), JSON_VALUE),
            JSON_VALUE,
            TEXT,
        ),
        max_size=20,
    ),
    fields=st.lists(st.sampled_from(["url", "source", "id", "dataset", "text", "x y"]), max_size=3),
)
def test_manifest_builder_reads_any_jsonl_or_refuses(
    tmp_path: Path, lines: list, fields: list
) -> None:
    from dataloaders.megatron.manifest_writer import build_manifest

    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(
        "\n".join(x if isinstance(x, str) else json.dumps(x, allow_nan=True) for x in lines),
        encoding="utf-8",
    )
    out = tmp_path / "m.manifest.parquet"
    out.unlink(missing_ok=True)
    table = refused_or(lambda: build_manifest(jsonl, fields, out))
    if table is not None:
        # one row per line of the file (a last empty element adds no line): else refused
        with open(jsonl, encoding="utf-8") as stream:
            assert table.height == sum(1 for _ in stream)
        assert pl.read_parquet(out).equals(table)


COLUMN = st.one_of(
    st.sampled_from(["doc_id", "url", "dataset", "iteration", "text", "exact", "source", "crawl"]),
    TEXT,
)


@settings(FAST, max_examples=25)
@given(
    columns=st.dictionaries(
        COLUMN,
        st.sampled_from(["str", "int", "float", "null", "list"]),
        min_size=0,
        max_size=4,
    ),
    rows=st.sampled_from([0, 1, 30, 150, 10_000]),
)
def test_the_replay_reads_any_manifest_or_refuses(
    small_run: Path, tmp_path: Path, columns: dict, rows: int
) -> None:
    """A hand-made PREFIX.manifest.parquet: the replay table keeps its own columns' meaning
    (reserved names never overwrite them) or the manifest is refused in one line."""
    from dataloaders.run_config import load_config
    from forensics.replay import open_replayer

    run = tmp_path / "run"
    if not run.exists():
        shutil.copytree(small_run, run, ignore=shutil.ignore_patterns("spike"))
    make = {
        "str": lambda n: pl.Series([f"v{i}" for i in range(n)]),
        "int": lambda n: pl.Series(list(range(n))),
        "float": lambda n: pl.Series([math.nan] * n),
        "null": lambda n: pl.Series([None] * n),
        "list": lambda n: pl.Series([[i] for i in range(n)]),
    }
    table = pl.DataFrame({name: make[kind](rows) for name, kind in columns.items()})
    table.write_parquet(run / "data" / "code.manifest.parquet")
    replayer = refused_or(lambda: open_replayer(load_config(run / "forensics.yaml")))
    if replayer is None:
        return
    got = refused_or(lambda: replayer.replay(165, 170, progress=False))
    if got is None:
        return
    assert got["iteration"].dtype in (pl.Int32, pl.Int64, pl.UInt32, pl.UInt64)
    assert set(got["dataset"].unique()) <= {"prose", "code", "web", "web_v2"}


# -- the run config --------------------------------------------------------------------------

VALID = {
    "data": {
        "format": "megatron",
        "seed": 1234,
        "seq_length": 64,
        "split": "98,2,0",
        "blend": [{"name": "web", "prefix": "data/web", "weight": 1.0}],
    },
    "training": {"global_batch_size": 8, "train_iters": 100},
}
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    TEXT,
    st.lists(st.integers(), max_size=3),
    st.dictionaries(TEXT, st.integers(), max_size=2),
)


def _paths(value: Any, at: tuple = ()) -> list[tuple]:
    """Every key path of a nested dict/list."""
    out = [at]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*at, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*at, i))
    return out


def _replace(value: Any, at: tuple, new: Any) -> Any:
    if not at:
        return new
    copy = json.loads(json.dumps(value))
    target = copy
    for key in at[:-1]:
        target = target[key]
    target[at[-1]] = new
    return copy


@FAST
@given(
    edits=st.lists(
        st.tuples(st.sampled_from(_paths(VALID)), ODD, st.booleans()), min_size=1, max_size=3
    )
)
def test_config_values_are_validated_or_refused(tmp_path: Path, edits: list) -> None:
    """Any value at any key (or a key removed): a RunConfig whose values have the declared
    types, or one ForensicsError line."""
    from dataloaders.run_config import config_from_dict

    raw: Any = VALID
    for at, value, delete in edits:
        try:
            if delete and at:
                raw = json.loads(json.dumps(raw))
                parent = raw
                for key in at[:-1]:
                    parent = parent[key]
                del parent[at[-1]]
            else:
                raw = _replace(raw, at, value)
        except (KeyError, IndexError, TypeError):
            continue
    config = refused_or(lambda: config_from_dict(raw, base_dir=tmp_path, source=None))
    if config is not None:
        assert isinstance(config.data.seed, int) and not isinstance(config.data.seed, bool)
        assert config.data.seq_length > 0
        assert config.training.global_batch_size > 0


@FAST
@given(text=st.one_of(TEXT, st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_any_yaml_text_is_a_config_or_one_line(tmp_path: Path, text: str) -> None:
    from dataloaders.run_config import load_config

    path = tmp_path / "run.yaml"
    path.write_text("data:\n  format: megatron\n" + text, encoding="utf-8")
    refused_or(lambda: load_config(path))
    path.write_text(text, encoding="utf-8")
    refused_or(lambda: load_config(path))


# -- check-skip on a hand-edited skip.json --------------------------------------------------


@settings(FAST, max_examples=50)
@given(
    edits=st.lists(st.tuples(st.integers(0, 10_000), ODD, st.booleans()), min_size=1, max_size=3)
)
def test_a_hand_edited_skip_file_is_checked_or_refused(
    small_run: Path, tmp_path: Path, edits: list
) -> None:
    """Any value at any key of skip.json, or a key removed: check-skip accepts only a plan that
    still drops exactly its batches (so an accepted edit changed nothing that matters), else
    refuses in one line."""
    from forensics.commands.check_skip import check_skip

    original = json.loads((small_run / "spike" / "skip.json").read_text())
    paths = _paths(original)[1:]
    data = original
    for pick, value, delete in edits:
        at = paths[pick % len(paths)]
        try:
            if delete:
                data = json.loads(json.dumps(data))
                parent = data
                for key in at[:-1]:
                    parent = parent[key]
                del parent[at[-1]]
            else:
                data = _replace(data, at, value)
        except (KeyError, IndexError, TypeError):
            continue
    assume(data != original)
    path = tmp_path / "skip.json"
    path.write_text(json.dumps(data, allow_nan=True))
    plan = refused_or(lambda: check_skip(path, small_run / "forensics.yaml"))
    if plan is not None:
        assert plan.ranges == [tuple(r) for r in original["iterations"]]
        assert plan.rollback["iteration"] == original["rollback"]["iteration"]
