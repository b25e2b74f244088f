"""torchtitan's tokenizer wrapper, as its text loader calls it: `encode(text, add_bos=True,
add_eos=True)` (torchtitan 0.3.0 torchtitan/hf_datasets/text_datasets.py:134-136).

The wrapper (components/tokenizer.py:94-446, `HuggingFaceTokenizer`) is not the bare
`tokenizers.Tokenizer`: it adds every special token of `tokenizer_config.json` to the tokenizer
(`_infer_special_tokens`, :337-391, which can change how text splits), takes the BOS and EOS ids
from there (:279-320), and inserts them unless encoding "" already yields them
(`_infer_should_add_bos_eos`, :393-419; `encode`, :421-450). The document lengths, and so every
sample boundary, depend on each of these steps, so they are followed here line by line with the
`tokenizers` library that torchtitan itself calls. torchtitan's vocab.json / vocab.txt folders
without a tokenizer.json (:194-248) are refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dataloaders.errors import ForensicsError

STANDARD_KEYS = (  # components/tokenizer.py:346-354
    "bos_token",
    "eos_token",
    "pad_token",
    "unk_token",
    "sep_token",
    "cls_token",
    "mask_token",
)


def _token_text(config: dict[str, Any], key: str, where: Path) -> str | None:
    """`_get_token_from_config` (:263-277): a string, or a dict's `content`."""
    token = config.get(key)
    if isinstance(token, dict):
        if "content" not in token:
            raise ForensicsError(f"{where}: cannot parse {key} (a dict without content)")
        return token["content"]
    if token is not None and not isinstance(token, str):
        raise ForensicsError(f"{where}: cannot parse {key} (expected a string or dict)")
    return token


class TitanTokenizer:
    """The run's tokenizer folder (`hf_assets_path`), encoding as torchtitan's text loader does."""

    def __init__(self, path: Path):
        from tokenizers import Tokenizer

        folder = Path(path)
        if folder.is_file() and folder.name == "tokenizer.json":
            folder = folder.parent
        json_path = self.json_path = folder / "tokenizer.json"
        if not json_path.is_file():
            raise ForensicsError(
                f"{folder}: no tokenizer.json (torchtitan's vocab.json / vocab.txt fallbacks are "
                "not replayed; give the hf_assets_path folder the run read)"
            )
        try:
            self.tokenizer = Tokenizer.from_file(str(json_path))
        except Exception as err:  # tokenizers raises bare Exceptions on malformed files
            raise ForensicsError(f"{json_path}: not a tokenizers file ({err})") from None
        self.config_path = folder / "tokenizer_config.json"
        self.config: dict[str, Any] | None = None
        if self.config_path.is_file():
            try:
                self.config = json.loads(self.config_path.read_text())
            except (OSError, ValueError) as err:
                raise ForensicsError(f"{self.config_path}: not readable JSON ({err})") from None
        self.bos_id: int | None = None
        self.eos_id: int | None = None
        self.bos_token: str | None = None
        self.eos_token: str | None = None
        if self.config is not None:
            self._add_special_tokens(self.config)
        empty = self.tokenizer.encode("").ids  # :404-409, what the tokenizer adds by itself
        self.adds_bos = self.bos_id is not None and self.bos_id in empty
        self.adds_eos = self.eos_id is not None and self.eos_id in empty

    def _special(self, text: str, token_config: Any, token_id: int | None) -> Any:
        """`_process_special_token` (:279-335): note BOS/EOS, return the AddedToken."""
        from tokenizers import AddedToken

        assert self.config is not None
        where = self.config_path
        if text == _token_text(self.config, "bos_token", where):
            self.bos_token = text
            self.bos_id = token_id if token_id is not None else self.tokenizer.token_to_id(text)
        if text == _token_text(self.config, "eos_token", where):
            self.eos_token = text
            self.eos_id = token_id if token_id is not None else self.tokenizer.token_to_id(text)
        if isinstance(token_config, dict) and (
            token_config.get("__type") == "AddedToken" or "content" in token_config
        ):
            return AddedToken(
                content=text,
                single_word=token_config.get("single_word", False),
                lstrip=token_config.get("lstrip", False),
                rstrip=token_config.get("rstrip", False),
                normalized=token_config.get("normalized", True),
                special=token_config.get("special", True),
            )
        return AddedToken(content=text, special=True)

    def _add_special_tokens(self, config: dict[str, Any]) -> None:
        """`_infer_special_tokens` (:337-391)."""
        added = []
        for key in STANDARD_KEYS:
            if config.get(key) is not None:
                text = _token_text(config, key, self.config_path)
                if text is not None:
                    added.append(self._special(text, config[key], None))
        for id_text, token_config in config.get("added_tokens_decoder", {}).items():
            if isinstance(token_config, dict) and "content" in token_config:
                added.append(self._special(token_config["content"], token_config, int(id_text)))
        if added:
            self.tokenizer.add_special_tokens(added)
            if self.bos_token:
                self.bos_id = self.tokenizer.token_to_id(self.bos_token)
            if self.eos_token:
                self.eos_id = self.tokenizer.token_to_id(self.eos_token)

    def encode_documents(self, texts: list[str]) -> list[list[int]]:
        """`encode(text, add_bos=True, add_eos=True)` of each text (:434-448)."""
        out = []
        for encoding in self.tokenizer.encode_batch(list(texts)):
            ids = list(encoding.ids)
            if not self.adds_bos and self.bos_id is not None:
                ids.insert(0, self.bos_id)
            if not self.adds_eos and self.eos_id is not None:
                ids.append(self.eos_id)
            out.append(ids)
        return out

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(list(ids))
