"""Decompression of MDS shards written with MDSWriter(compression=...), as streaming does it.

mosaicml-streaming 0.13.0 knows five codecs (streaming/base/compression.py:79-166 at
mosaicml/streaming@89e7bb90): br (Brotli, levels 0-11), bz2 (1-9), gz (0-9), snappy (no levels)
and zstd (1-22), named "<codec>" or "<codec>:<level>" in index.json's `compression`. The level
only matters when writing. Each is decompressed with the library streaming itself calls:
`brotli.decompress` (Brotli), `bz2.decompress`, `gzip.decompress`, `snappy.decompress`
(python-snappy) and `zstd.decompress` (zstd), imported on first use; a missing one is refused in
one line naming the package to install.
"""

from __future__ import annotations

from collections.abc import Callable

# codec -> (levels streaming accepts, or None for none; module; the pip package)
CODECS: dict[str, tuple[range | None, str, str]] = {
    "br": (range(12), "brotli", "Brotli"),
    "bz2": (range(1, 10), "bz2", "(the standard library)"),
    "gz": (range(10), "gzip", "(the standard library)"),
    "snappy": (None, "snappy", "python-snappy"),
    "zstd": (range(1, 23), "zstd", "zstd"),
}


def check_compression(algo: str | None) -> str:
    """The codec of a compression name streaming accepts (is_compression, compression.py
    :198-207: the bare codec or codec:level with a level it lists); ValueError otherwise."""
    codec, sep, level = (algo or "").partition(":")
    known = CODECS.get(codec)
    ok = known is not None and (
        not sep or (known[0] is not None and level in {str(n) for n in known[0]})
    )
    if not ok:
        raise ValueError(
            f"compression {algo!r} is not one streaming 0.13 writes (br, bz2, gz, snappy, zstd, "
            "optionally with :level)"
        )
    return codec


def require_codec(algo: str | None) -> None:
    """check_compression, and the codec's library importable (ValueError: one line)."""
    _decompressor(check_compression(algo))


def _decompressor(codec: str) -> Callable[[bytes], bytes]:
    import importlib

    _, module, package = CODECS[codec]
    try:
        return importlib.import_module(module).decompress
    except ImportError:
        raise ValueError(
            f"reading {codec}-compressed shards needs the {package} package (pip install "
            f"{package}), the library streaming decompresses them with"
        ) from None


def decompress(algo: str | None, data: bytes) -> bytes:
    """The shard's raw bytes (streaming's decompress, compression.py:243-259)."""
    if algo is None:
        return data
    return _decompressor(check_compression(algo))(data)
