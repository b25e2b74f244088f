"""The `data:` section of a Megatron run (`format: megatron`): megatron-core's GPTDataset /
BlendedDataset parameters, the run's `--data-*` arguments, as one blend or blends that change at
given iterations (data stages)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from dataloaders.config_base import DataSection, PrintableName, StrictModel
from dataloaders.megatron.remote import place_remote_prefixes


class DatasetSpec(StrictModel):
    """One dataset of a blend: a Megatron path prefix (without .bin/.idx) and its weight.

    A prefix in object storage (`s3://bucket/key`, `msc://profile/key`) is kept in `remote`;
    `prefix` is then where megatron-core caches its `.idx` (`object_storage_cache_path` joined
    with the URL without its scheme, Megatron-LM core 0.16.1
    `megatron/core/datasets/object_storage_utils.py:170-192`), see MegatronData."""

    prefix: Path
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    name: PrintableName | None = None
    manifest: Path | None = None  # Parquet, one row per document in .idx order (doc_id + facets)
    remote: str | None = None  # the prefix's URL when the data is in object storage

    @property
    def display_name(self) -> str:
        return self.name or self.prefix.name


class DataStage(StrictModel):
    """A blend in force from `start_iteration` on (1-indexed).

    A mixture switch in a Megatron run is a restart with a new --data-path: the new
    BlendedDataset is built for the same number of training samples, and the loader continues at
    the consumed-samples count, i.e. global sample c is drawn from the new blend's sample c.
    """

    start_iteration: int = Field(default=1, ge=1)
    blend: list[DatasetSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> DataStage:
        names = [d.display_name for d in self.blend]
        if len(set(names)) != len(names):
            raise ValueError(f"dataset names in a blend must be unique, got {names}")
        return self


class MegatronData(DataSection):
    """Megatron-core GPTDataset / BlendedDataset parameters (the run's --data-* arguments)."""

    format: Literal["megatron"] = "megatron"
    seed: int = Field(default=1234, ge=0, le=2**32 - 1)  # numpy RandomState's range, as Megatron
    seq_length: int = Field(gt=0)
    split: str = "969,30,1"
    add_extra_token: bool = True  # megatron-core's add_extra_token_to_sequence (default True)
    mid_level_dataset_surplus: float = 0.005
    cache_path: Path | None = None  # --data-cache-path; Megatron's own .npy indices are read here
    # --object-storage-cache-path: where s3:// and msc:// prefixes' .idx files are cached
    object_storage_cache_path: Path | None = None
    blend: list[DatasetSpec] | None = None  # a single blend for the whole run ...
    stages: list[DataStage] | None = None  # ... or blends that change at given iterations
    # a run without data in object storage hashes as it did before the field existed
    unhashed_defaults: ClassVar[dict[str, Any]] = {"object_storage_cache_path": None}

    @model_validator(mode="before")
    @classmethod
    def _remote_prefixes(cls, raw: Any) -> Any:
        """Prefixes in object storage: the URL moves to `remote`, the prefix becomes its place
        in the object-storage cache (dataloaders/megatron/remote.py)."""
        return place_remote_prefixes(raw)

    @field_validator("split")
    @classmethod
    def _split_numbers(cls, value: str) -> str:
        parts = re.findall(r"[.0-9]+", value)
        if "-" in value or not parts or len(parts) > 3 or sum(float(p) for p in parts) <= 0:
            raise ValueError(f"split must be like '969,30,1', got {value!r}")
        return value

    @model_validator(mode="after")
    def _blend_or_stages(self) -> MegatronData:
        if (self.blend is None) == (self.stages is None):
            raise ValueError("give exactly one of data.blend or data.stages")
        if self.stages is not None:
            starts = [s.start_iteration for s in self.stages]
            if starts[0] != 1 or starts != sorted(set(starts)):
                raise ValueError(
                    f"data.stages must start at iteration 1 and increase strictly, got {starts}"
                )
        if self.blend is not None:
            names = [d.display_name for d in self.blend]
            if len(set(names)) != len(names):
                raise ValueError(f"dataset names in a blend must be unique, got {names}")
        return self

    @property
    def data_stages(self) -> list[DataStage]:
        """The blend schedule, always as stages (a plain blend is one stage from iteration 1)."""
        if self.stages is not None:
            return list(self.stages)
        assert self.blend is not None
        return [DataStage(start_iteration=1, blend=self.blend)]
