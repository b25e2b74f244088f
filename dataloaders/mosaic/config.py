"""The `data:` section of a MosaicML streaming run (`format: mosaic-streaming`): StreamingDataset's
arguments as an llm-foundry `train_loader.dataset` gives them, plus the world and the DataLoader.

Defaults are mosaicml-streaming 0.13.0's StreamingDataset.__init__ (streaming/base/dataset.py
:317-343 at mosaicml/streaming@89e7bb90, byte-identical to the 0.13.0 wheel); llm-foundry's
StreamingTextDataset (llmfoundry/data/text_data.py:112-145 at mosaicml/llm-foundry@8c8dd48f)
passes the same defaults on. tests/dataloaders/mosaic/test_mosaic_fields.py checks each against
the installed library.

`remote` (s3:// only) fills `local` as Stream does: index.json, then only the shards a window
reads (dataloaders/mosaic/remote.py). Accepted but without effect on the order: download_retry,
download_timeout, validate_hash, keep_zip (downloading; dataset.py
:434-445 only hands them to the Streams), predownload and cache_limit (how far ahead shards are
fetched and when they are evicted: _prepare_thread / evict_coldest_shard never reorder the sample
ids of _get_work), allow_unsafe_types (whether a pickle column may be decoded; we never decode
one), and llm-foundry's tokenization fields max_seq_len, eos_token_id, bos_token_id,
token_encoding_type, override_*_mismatch_error (text_data.py:198-241: per-sample tokenization)
and the DataLoader's pin_memory, prefetch_factor, persistent_workers, timeout (the main process
takes worker batches in index order whatever the prefetch). `split` (the stream's subfolder),
`replication` and `epoch_size: "4k"` change the order and are replayed; `stream_name` other than
"stream", a non-empty `stream_config` and `seq_parallel_replication` > 1 are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from dataloaders.config_base import DataSection, PrintableName, StrictModel, check_resume_order
from dataloaders.mosaic.numbers import epoch_size_value
from dataloaders.mosaic.remote import check_remote

# Fields accepted for an llm-foundry / StreamingDataset config that do not change the order.
IGNORED_FIELDS = (
    "remote",
    "download_retry",
    "download_timeout",
    "validate_hash",
    "keep_zip",
    "predownload",
    "cache_limit",
    "allow_unsafe_types",
    "max_seq_len",
    "eos_token_id",
    "bos_token_id",
    "token_encoding_type",
    "override_eos_token_id_mismatch_error",
    "override_bos_token_id_mismatch_error",
    "pin_memory",
    "prefetch_factor",
    "persistent_workers",
    "timeout",
)


class MosaicStream(StrictModel):
    """One MosaicML `Stream`: a local MDS directory (index.json + shards) and its weight, given as
    at most one of proportion (relative), repeat or choose (absolute), as in streaming.Stream.
    `split` is joined onto `local` and `remote` when the config is read (Stream reads
    local/split, stream.py:441, and remote/split, :310); with `remote`, index.json and the shards
    a window reads are downloaded into `local` as Stream does (dataloaders/mosaic/remote.py).
    The download knobs are accepted and have no effect on the order."""

    local: Path  # the directory holding index.json (Stream's local/split joined)
    name: PrintableName | None = None  # the `dataset` column (default: folder name)
    proportion: float | None = Field(default=None, ge=0)
    repeat: float | None = Field(default=None, ge=0)
    choose: int | None = Field(default=None, ge=0)
    remote: str | None = None
    download_retry: int | None = Field(default=None, ge=0)
    download_timeout: float | None = Field(default=None, gt=0)
    validate_hash: str | None = None
    keep_zip: bool | None = None

    @model_validator(mode="after")
    def _one_weight(self) -> MosaicStream:
        given = [w for w in (self.proportion, self.repeat, self.choose) if w is not None]
        if len(given) > 1:
            raise ValueError("give at most one of proportion, repeat, choose (streaming's rule)")
        return self

    @property
    def display_name(self) -> str:
        return self.name or self.local.name


class MosaicState(StrictModel):
    """A StreamingDataset.state_dict() as the checkpoint stored it (Composer: the train
    dataloader's `dataset_state`; dataset.py:778-814)."""

    epoch: int = Field(ge=0)
    sample_in_epoch: int = Field(ge=0)
    num_canonical_nodes: int = Field(gt=0)
    shuffle_seed: int = Field(ge=0)
    initial_physical_nodes: int | None = Field(default=None, gt=0)


class MosaicResume(StrictModel):
    """A restart of a streaming run: iteration `iteration` (the first after the restart) is the
    first batch the resumed StreamingDataset yields from `state` (the state_dict the checkpoint
    stored: inline, or `state_file`, a JSON file holding it). num_nodes / ranks_per_node /
    num_workers / batch_size give the resumed run's world where it differs from the run's start
    (streaming's elastic resumption, same num_canonical_nodes); the global batch stays."""

    iteration: int = Field(ge=2)
    state: MosaicState | None = None
    state_file: Path | None = None
    num_nodes: int | None = Field(default=None, gt=0)
    ranks_per_node: int | None = Field(default=None, gt=0)
    num_workers: int | None = Field(default=None, ge=0)
    batch_size: int | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_state(self) -> MosaicResume:
        if (self.state is None) == (self.state_file is None):
            raise ValueError("give exactly one of state or state_file for a resume")
        return self


def _normalise_streams(raw: dict[str, Any]) -> dict[str, Any]:
    """streams as a list with `split` joined onto `local`: llm-foundry's `streams:` mapping (name
    -> Stream kwargs, text_data.py:293-301) becomes a list in mapping order named by its keys;
    without streams, the dataset's own remote/local/split are its one stream (dataset.py
    :446-468); a top-level split is every stream's default (Stream.apply_default,
    stream.py:187-188)."""
    raw = dict(raw)
    streams = raw.get("streams")
    own = {k: raw.pop(k) for k in ("local", "remote") if raw.get(k) is not None}
    split = raw.pop("split", None)
    if streams and own:
        raise ValueError(
            "give either streams or the dataset's own local/remote, not both (streaming's rule)"
        )
    if isinstance(streams, dict):
        streams = [{"name": str(k), **(v or {})} for k, v in streams.items()]
    elif not streams and own:
        streams = [own]
    if not isinstance(streams, list):
        return raw
    out = []
    for stream in streams:
        if not isinstance(stream, dict):
            out.append(stream)
            continue
        stream = dict(stream)
        sub = stream.pop("split", None) or split
        if stream.get("local") is None:
            raise ValueError(
                "every stream needs `local`, the folder holding (or receiving) its shards "
                f"(stream {stream.get('name') or stream.get('remote')!r})"
            )
        if stream.get("remote") is not None:
            check_remote(str(stream["remote"]))
        if sub:
            # named for its folder, not for the split every stream shares
            folder = Path(stream["local"])
            stream.setdefault("name", folder.name)
            stream["local"] = str(folder / sub)
            if stream.get("remote") is not None:  # Stream reads remote/split (stream.py:310)
                stream["remote"] = f"{str(stream['remote']).rstrip('/')}/{sub}"
        out.append(stream)
    raw["streams"] = out
    return raw


class MosaicData(DataSection):
    """A MosaicML StreamingDataset over local MDS streams, iterated by a torch DataLoader on every
    rank (see dataloaders/mosaic for the order). Field names and defaults are StreamingDataset's
    (module docstring); the world is num_nodes x ranks_per_node ranks, num_workers DataLoader
    workers each. Iteration i takes the i-th DataLoader batch of every rank; rank r's example j
    sits at global position r * batch_size + j. With `replication` R, R consecutive ranks get the
    same samples (World.replicate, world.py:117-148): the replay is the world of those groups,
    each sample once per iteration, and the global batch is batch_size x ranks / R."""

    format: Literal["mosaic-streaming"]
    streams: list[MosaicStream] = Field(min_length=1)
    text_field: str = "text"
    provenance_fields: list[str] = Field(default_factory=list)  # MDS columns; `shard` is added
    epoch_size: int | float | str | None = None  # int, or "4k" as streaming parses it
    sampling_method: Literal["balanced", "fixed"] = "balanced"
    sampling_granularity: int = Field(default=1, gt=0)
    partition_algo: Literal["orig", "relaxed"] = "relaxed"
    num_canonical_nodes: int | None = Field(default=None, gt=0)
    batch_size: int = Field(gt=0)  # per device, as given to StreamingDataset and the DataLoader
    shuffle: bool = False
    shuffle_algo: Literal["py1e", "py1br", "py1b", "py1s", "py2s", "naive"] = "py1e"
    shuffle_seed: int = Field(default=9176, ge=0)
    shuffle_block_size: int | None = Field(default=None, gt=0)
    batching_method: Literal["random", "stratified", "per_stream", "device_per_stream"] = "random"
    replication: int | None = Field(default=None, gt=0)
    stream_name: str = "stream"
    stream_config: dict[str, Any] | None = None
    seq_parallel_replication: int | None = None
    num_nodes: int = Field(default=1, gt=0)
    ranks_per_node: int = Field(default=1, gt=0)
    num_workers: int = Field(default=0, ge=0)  # torch DataLoader's default
    drop_last: bool = False  # torch DataLoader's default
    streaming_version: str = "0.13.0"
    resumes: list[MosaicResume] = Field(default_factory=list)
    # Accepted, no effect on the order (module docstring says why).
    download_retry: int = Field(default=2, ge=0)
    download_timeout: float = Field(default=60, gt=0)
    validate_hash: str | None = None
    keep_zip: bool = False
    predownload: int | None = None
    cache_limit: int | str | None = None
    allow_unsafe_types: bool = False
    max_seq_len: int | None = None
    eos_token_id: int | None = None
    bos_token_id: int | None = None
    token_encoding_type: str = "int64"
    override_eos_token_id_mismatch_error: bool = False
    override_bos_token_id_mismatch_error: bool = False
    pin_memory: bool | None = None
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    timeout: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _llm_foundry_layout(cls, raw: Any) -> Any:
        return _normalise_streams(raw) if isinstance(raw, dict) else raw

    @field_validator("epoch_size", mode="before")
    @classmethod
    def _epoch_size(cls, value: int | float | str | None) -> int | None:
        return epoch_size_value(value)

    @model_validator(mode="after")
    def _consistent(self) -> MosaicData:
        names = [s.display_name for s in self.streams]
        if len(set(names)) != len(names):
            raise ValueError(f"stream names must be unique, got {names}")
        relative = [s.proportion is not None for s in self.streams]
        if any(relative) and not all(relative):
            raise ValueError("streams mix proportion with repeat/choose (streaming refuses it)")
        absolute = any(s.repeat is not None or s.choose is not None for s in self.streams)
        if absolute and self.epoch_size is not None:
            raise ValueError("epoch_size only goes with proportion weights (streaming's rule)")
        if self.stream_name != "stream" or self.stream_config:
            raise ValueError(
                "stream_name / stream_config: only streaming's own Stream is replayed; give the "
                "streams as `streams` (local, split, proportion / repeat / choose)"
            )
        if (self.seq_parallel_replication or 1) > 1:
            raise ValueError("seq_parallel_replication > 1: llm-foundry refuses it too")
        if self.replication is not None and self.world_size % self.replication:
            raise ValueError(
                f"replication {self.replication} does not divide the {self.world_size} ranks "
                "(streaming refuses it)"
            )
        check_resume_order(self.resumes)
        return self

    def check_run(self, run: Any) -> None:
        training = run.training
        if training.global_batch_size != self.global_batch_size:
            raise ValueError(
                f"training.global_batch_size {training.global_batch_size} != "
                f"data.batch_size x num_nodes x ranks_per_node = {self.global_batch_size}"
            )
        if training.resumes or training.rampup_batch_size is not None:
            raise ValueError(
                "streaming runs give restarts in data.resumes (state_dict) and have no "
                "batch-size ramp"
            )
        if training.applied_skips:
            raise ValueError(
                "training.applied_skips: the streaming replay does not model trainer skips a "
                "restart already applied; leave them out and read the block list"
            )

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.ranks_per_node

    @property
    def global_batch_size(self) -> int:
        """Distinct examples per iteration over all ranks (must equal
        training.global_batch_size): ranks that replicate one another count once."""
        return self.batch_size * self.world_size // (self.replication or 1)

    @property
    def ignored_fields(self) -> list[str]:
        """The fields this config sets that have no effect on the order (module docstring)."""
        given = self.model_fields_set
        stream_given = {f for s in self.streams for f in s.model_fields_set}
        return [f for f in IGNORED_FIELDS if f in given or f in stream_given]
