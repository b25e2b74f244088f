"""The run config: everything needed to replay a training job's data order, in one validated file.

A config names the data (a Megatron blend, possibly changing at given iterations, or a Hugging Face
`datasets` pipeline), the batch-size schedule, the tokenizer that turns tokens back into text, and
where the checkpoints are. Unknown keys are errors: a typo in `seed` must not silently replay a
different run. Relative paths are resolved against the config file's directory, so a config can
travel with its data.

Example (configs/demo.yaml is a complete one)::

    name: web-code-7b
    data:
      format: megatron
      seed: 1234
      seq_length: 4096
      split: "969,30,1"
      cache_path: /checkpoints/7b/data-cache
      stages:
        - start_iteration: 1
          blend:
            - {name: web, prefix: data/web_text_document, weight: 0.7,
               manifest: data/web.manifest.parquet}
            - {name: code, prefix: data/code_text_document, weight: 0.3}
        - start_iteration: 80001          # mixture switch: a restart with a new --data-path
          blend: [...]
    training:
      global_batch_size: 1024
      train_iters: 120000
      rampup_batch_size: [32, 32, 2000000]  # optional, Megatron's --rampup-batch-size
      resumes:                              # optional: consumed samples restored at a restart
        - {iteration: 50001, consumed_samples: 51200000}
    tokenizer: data/tokenizer.json
    tokenizer_args:                          # optional: Megatron's tokenizer flags, named as in
      tokenizer_type: TikTokenizer           #   its args (docs/tokenizers.md)
    checkpoint_dir: /checkpoints/7b          # its checkpoint folders (Megatron: iter_NNNNNNN)
    log: logs/train.log                      # optional, overlays the loss on the report
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from dataloaders.config_base import PrintableName, StrictModel
from dataloaders.data_sections import DataConfig, data_model
from dataloaders.errors import ConfigError
from dataloaders.run_sections import TokenizerArgs, TrainingSpec
from dataloaders.storage.urls import is_remote
from dataloaders.trainers import Trainer

CONFIG_ENV_VAR = "FORENSICS_CONFIG"
DEFAULT_CONFIG_NAME = "forensics.yaml"


def payload_hash(payload: Any) -> str:
    """The 16-hex-digit sha256 of a JSON-able payload (keys sorted)."""
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _without_unhashed_defaults(payload: dict[str, Any], data: Any) -> dict[str, Any]:
    """`payload` without the data fields its family leaves out of the hashes while they are at
    their defaults (`DataSection.unhashed_defaults`)."""
    section = payload.get("data")
    if isinstance(section, dict):
        for key, default in type(data).unhashed_defaults.items():
            if key in section and section[key] == default:
                del section[key]
        stages = [*(section.get("stages") or []), {"blend": section.get("blend") or []}]
        for stage in stages:  # a Megatron dataset not in object storage: no `remote` key
            for spec in stage.get("blend") or []:
                if isinstance(spec, dict) and spec.get("remote", "") is None:
                    del spec["remote"]
    return payload


def _without_paths(value: Any) -> Any:
    """`value` with every Path (and every list or dict entry holding one) left out, and the URL
    of data in object storage (`remote`): a copy of the data elsewhere is the same order."""
    if isinstance(value, dict):
        return {
            k: _without_paths(v)
            for k, v in value.items()
            if not isinstance(v, Path) and k != "remote" and not is_remote(v)
        }
    if isinstance(value, list | tuple):
        return [_without_paths(v) for v in value if not isinstance(v, Path) and not is_remote(v)]
    return value


class RunConfig(StrictModel):
    """A whole run: data, schedule, tokenizer, checkpoints. Paths are absolute after loading."""

    name: PrintableName | None = None
    data: DataConfig
    training: TrainingSpec
    # A Hugging Face tokenizer.json, a directory holding one, or GPT-2's vocab.json (with
    # merges.txt beside it or named in tokenizer_merges); see dataloaders/tokenizer.py.
    tokenizer: Path | None = None
    tokenizer_merges: Path | None = None
    # Megatron's tokenizer flags (SentencePiece, TikTokenizer; dataloaders/tokenizer_megatron.py)
    tokenizer_args: TokenizerArgs | None = None
    checkpoints: list[int] = Field(default_factory=list)
    checkpoint_dir: Path | None = None  # the save folder, read for the trainer's checkpoints
    log: Path | None = None  # the training log, to overlay the loss on the report
    source: Path | None = Field(default=None, exclude=True)  # where this config was read from
    # How a config that no file holds was given (e.g. "--from-checkpoint /ckpt"), for messages
    # and the commands the outputs suggest; None for a YAML file or --megatron-args.
    origin: str | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _family_trainer(cls, raw: Any) -> Any:
        """training.trainer, when not given, is the one the data family is read by (an
        OLMo-core data loader by OLMo-core's trainer, `DataSection.default_trainer`)."""
        if isinstance(raw, dict) and isinstance(raw.get("data"), dict):
            training = raw.get("training")
            model = data_model(raw["data"].get("format"))
            trainer = model.default_trainer if model is not None else None
            if trainer is not None and isinstance(training, dict):
                raw = {**raw, "training": {"trainer": trainer, **training}}
        return raw

    @model_validator(mode="after")
    def _data_fits_run(self) -> RunConfig:
        """The data family's rules over the whole config (`DataSection.check_run`)."""
        self.data.check_run(self)
        return self

    def config_hash(self) -> str:
        """A stable hash of everything that determines the data order (not paths' spelling)."""
        return payload_hash(self.hash_payload())

    def hash_payload(self) -> dict[str, Any]:
        """What config_hash hashes: the config as JSON, without where it was read from."""
        payload = _without_unhashed_defaults(
            self.model_dump(mode="json", exclude={"source", "log", "name"}), self.data
        )
        if payload.get("tokenizer_args") is None:  # left out when unset, as applied_skips is
            payload.pop("tokenizer_args", None)
        # The trainer decides how skip flags are spelled, not the data order; skips a restart
        # already applied do change it (and are left out when there are none, so hashes of
        # runs without them stay what they were).
        payload["training"].pop("trainer", None)
        if not payload["training"].get("applied_skips"):
            payload["training"].pop("applied_skips", None)
        return payload

    def order_hash(self) -> str:
        """A hash of the settings that decide which batch an iteration is: config_hash without
        any path, the checkpoint list or the tokenizer. Recorded beside config_hash so that
        check-skip can tell "the run directory moved" or "the checkpoint list changed" (the
        batches are the same) from "the blend or schedule changed" (they are not); the data
        files themselves are compared by content in the fingerprint."""
        payload = _without_unhashed_defaults(
            self.model_dump(exclude={"source", "log", "name", "checkpoints", "tokenizer_args"}),
            self.data,
        )
        payload["training"].pop("trainer", None)
        if not payload["training"].get("applied_skips"):
            payload["training"].pop("applied_skips", None)
        return payload_hash(_without_paths(payload))

    def available_checkpoints(self, trainer: Trainer | None = None) -> list[int]:
        """Checkpoint iterations from the list and from the checkpoint folders in checkpoint_dir,
        sorted: the folders `trainer` saves (the run's trainer; default training.trainer)."""
        found = set(self.checkpoints)
        if self.checkpoint_dir is not None and self.checkpoint_dir.is_dir():
            saver = trainer or self.training.registered_trainer
            found.update(saver.checkpoints(self.checkpoint_dir))
        return sorted(found)


def _resolve_paths(raw: Any, base: Path) -> Any:
    """Resolve relative path-valued keys against `base` (the config file's directory)."""
    path_keys = {
        "prefix",
        "manifest",
        "cache_path",
        "tokenizer",
        "tokenizer_merges",
        "checkpoint_dir",
        "log",
        "work_dir",
        "state",
        "local",
        "state_file",
        "mix_base_dir",
        "mix_file",
        "object_storage_cache_path",
        "checkpoint",  # a torchtitan resume's step-N folder
    }
    path_list_keys = {"files", "data_files", "paths"}
    if isinstance(raw, dict):
        out = {}
        for key, value in raw.items():
            if isinstance(value, str) and is_remote(value):
                out[key] = value  # a URL (s3://, gs://, ...) is not relative to anything
            elif key in path_keys and isinstance(value, str):
                out[key] = str((base / os.path.expanduser(value)).resolve())
            elif key in path_list_keys and isinstance(value, list):
                out[key] = [
                    str((base / os.path.expanduser(v)).resolve())
                    if isinstance(v, str) and not is_remote(v)
                    else v
                    for v in value
                ]
            elif key == "path" and isinstance(value, str):
                out[key] = str((base / os.path.expanduser(value)).resolve())
            else:
                out[key] = _resolve_paths(value, base)
        return out
    if isinstance(raw, list):
        return [_resolve_paths(v, base) for v in raw]
    return raw


def _format_validation_error(path: Path, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    where = f"{loc}: " if loc else ""  # a rule over the whole config (check_run) has no field
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{path}: {where}{first['msg']}{more}"


def config_from_dict(raw: dict[str, Any], *, base_dir: Path, source: Path | None) -> RunConfig:
    """Validate a config mapping; relative paths resolve against `base_dir`."""
    if not isinstance(raw, dict):
        where = source or base_dir
        raise ConfigError(f"{where}: a run config is a mapping (data:, training:, ...)")
    resolved = _resolve_paths(raw, base_dir)
    try:
        return RunConfig.model_validate({**resolved, "source": source})
    except ValidationError as err:
        raise ConfigError(_format_validation_error(source or base_dir, err)) from None


MAX_CONFIG_BYTES = 1 << 20  # a run config is a page; a megabyte of YAML is not one
MAX_CONFIG_NODES = 100_000  # values in the config with every alias expanded


def _refuse_duplicate_keys(node: Any, path: Path) -> None:
    """A key twice in one mapping: YAML keeps the last value without a word, so the run would be
    replayed with a setting the user did not see."""
    seen: dict[str, int] = {}
    for key, _ in node.value:
        if getattr(key, "tag", "").endswith(":merge") or not isinstance(key.value, str):
            continue
        line = key.start_mark.line + 1
        if key.value in seen:
            raise ConfigError(
                f"{path}: line {line}: key {key.value!r} is given twice in one mapping (first on "
                f"line {seen[key.value]}); YAML keeps the last silently, so keep one"
            )
        seen[key.value] = line


def _refuse_octal(node: Any, path: Path) -> None:
    """An integer written with a leading zero: YAML 1.1 (PyYAML) reads `010` as octal 8, not
    10, so `seed: 010` would replay another seed."""
    if node.tag.endswith(":int") and re.fullmatch(r"[-+]?0[0-9_]+", node.value):
        raise ConfigError(
            f"{path}: line {node.start_mark.line + 1}: {node.value} has a leading zero, which "
            f"YAML reads as an octal number; write it without the zero (or quote it as text)"
        )


def _safe_yaml(text: str, path: Path) -> Any:
    """yaml.safe_load that refuses a document whose aliases expand past MAX_CONFIG_NODES values:
    each alias stands for its anchor's whole subtree, so a few hundred bytes of nested aliases
    (the "billion laughs") become billions of values once anything walks them."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        weights: dict[int, int] = {}

        def weight(n: Any) -> int:
            if id(n) in weights:
                return weights[id(n)]
            weights[id(n)] = 1  # a recursive anchor counts once
            total = 1
            if isinstance(n, yaml.SequenceNode):
                total += sum(weight(child) for child in n.value)
            elif isinstance(n, yaml.MappingNode):
                _refuse_duplicate_keys(n, path)
                total += sum(weight(k) + weight(v) for k, v in n.value)
            elif isinstance(n, yaml.ScalarNode):
                _refuse_octal(n, path)
            weights[id(n)] = total
            if total > MAX_CONFIG_NODES:
                raise ConfigError(
                    f"{path}: its YAML aliases expand to more than {MAX_CONFIG_NODES:,} values; "
                    "write the config out without nested aliases"
                )
            return total

        weight(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def load_config(path: str | os.PathLike[str]) -> RunConfig:
    """Read and validate a YAML run config; every problem is one line naming the file."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}: {size:,} bytes is not a run config (at most {MAX_CONFIG_BYTES:,})"
        )
    try:
        raw = _safe_yaml(path.read_text(encoding="utf-8"), path)
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ConfigError(f"{path}: not valid YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return config_from_dict(raw, base_dir=path.resolve().parent, source=path.resolve())


def find_config(explicit: str | os.PathLike[str] | None) -> Path:
    """The runbook rule: --config, else $FORENSICS_CONFIG, else ./forensics.yaml."""
    if explicit is not None:
        return Path(explicit)
    env = os.environ.get(CONFIG_ENV_VAR)
    if env:
        return Path(env)
    local = Path.cwd() / DEFAULT_CONFIG_NAME
    if local.is_file():
        return local
    raise ConfigError(
        f"no config: pass --config, set {CONFIG_ENV_VAR}, "
        f"or put {DEFAULT_CONFIG_NAME} in {Path.cwd()}"
    )
