"""A Hugging Face model directory (`save_pretrained`: config.json + safetensors), loaded with
transformers' AutoModelForCausalLM.

Pickled weights (`pytorch_model.bin` and its shards) are read by transformers with
`torch.load(weights_only=True)` and nothing added to torch's defaults (transformers 5.25.0
modeling_utils.py:321, :365); dataloaders.safe_pickle first refuses, unread and in one line, a
file that pickles anything else, so no traceback and nothing of the file runs."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any, ClassVar

from dataloaders.safe_pickle import check_torch_save
from forensics.errors import ForensicsError
from forensics.rescore.reader import CheckpointReader

WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def check_pickled_weights(path: Path) -> None:
    """`pytorch_model.bin` and its shards hold only what torch allows by default (all
    transformers' weights-only load allows), checked unread; safetensors hold no pickle."""
    for weights in sorted(path.glob("pytorch_model*.bin")):
        check_torch_save(weights, [], "a Hugging Face weights file")


class HFCheckpoint(CheckpointReader):
    """config.json beside the weights; also what a directory no other reader recognises is
    taken for (its checks then say what is missing)."""

    kind: ClassVar[str] = "hf"

    def recognises(self, path: Path) -> bool:
        return (path / "config.json").is_file() and not (path / "model_and_optim").is_dir()

    def check(self, path: Path) -> dict[str, Any]:
        """The checkpoint's config.json. One-line errors for: no config.json, no weights, a
        config that is not a causal language model's."""
        config_file = path / "config.json"
        if not config_file.is_file():
            raise ForensicsError(
                f"{path}: no config.json: not a Hugging Face model directory (config.json + "
                "model.safetensors, as save_pretrained writes)"
            )
        try:
            config = json.loads(config_file.read_text())
        except (OSError, ValueError) as err:
            raise ForensicsError(f"{config_file}: not readable JSON ({err})") from None
        if not isinstance(config, dict) or "model_type" not in config:
            raise ForensicsError(
                f"{config_file}: has no model_type: not a transformers model config"
            )
        archs = config.get("architectures") or []
        causal = ("ForCausalLM", "LMHeadModel")
        if config.get("is_encoder_decoder") or (
            archs and not any(a.endswith(causal) for a in archs)
        ):
            raise ForensicsError(
                f"{path}: a {config['model_type']!r} model ({', '.join(archs) or 'encoder-decoder'}"
                ") is not a causal language model (no ...ForCausalLM / ...LMHeadModel head); pass "
                "the pre-spike checkpoint of the model that was trained"
            )
        if not any((path / name).is_file() for name in WEIGHT_FILES):
            raise ForensicsError(
                f"{path}: no weights ({', '.join(WEIGHT_FILES)}); save the model with "
                "save_pretrained"
            )
        check_pickled_weights(path)
        return config

    def content_files(self, path: Path) -> list[Path]:
        """config.json and the weight files (.safetensors, .bin) at the top level."""
        return sorted(
            p
            for p in path.iterdir()
            if p.is_file() and (p.name == "config.json" or p.suffix in (".safetensors", ".bin"))
        )

    def load(self, path: Path, device: str, dtype: str) -> Any:
        try:
            import torch
            import transformers
            from transformers import AutoConfig, AutoModelForCausalLM
        except ImportError as err:
            raise ForensicsError(
                f"rescoring needs torch and transformers ({err.name} is missing): pip install "
                "'forensics[embed]'"
            ) from None
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ForensicsError(f"--device {device}: no CUDA device is available here")
        transformers.logging.set_verbosity_error()
        check_pickled_weights(path)
        try:
            config = AutoConfig.from_pretrained(path, local_files_only=True)
        except (ValueError, KeyError, OSError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ForensicsError(f"{path}: transformers cannot read its config ({first})") from None
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        if config.model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            raise ForensicsError(
                f"{path}: a {config.model_type!r} model is not a causal language model "
                "(AutoModelForCausalLM cannot load it); pass the pre-spike checkpoint of the "
                "model that was trained"
            )
        try:
            model = AutoModelForCausalLM.from_pretrained(
                path, local_files_only=True, dtype=getattr(torch, dtype)
            )
        except (ValueError, OSError, RuntimeError, pickle.UnpicklingError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ForensicsError(f"{path}: the weights do not load ({first})") from None
        return model.eval().to(device)
