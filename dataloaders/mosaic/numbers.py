"""streaming's human-readable numbers: `epoch_size: "4k"` and friends, parsed exactly as
mosaicml-streaming 0.13.0 parses them, so a config copied from an llm-foundry YAML means the same
epoch size here as in the run.

number_abbrev_to_int is streaming/base/util.py:125-166 (mosaicml/streaming@89e7bb90, whose
streaming/base/ is byte-identical to the 0.13.0 wheel), transcribed line for line: suffixes k, m,
b, t (powers of 1000, case-insensitive, surrounding whitespace stripped) on a float literal,
truncated toward zero by int(); without a suffix only str.isdigit() strings. The quirks are the
library's and are kept (`"1.5k"` is 1500, `"0.1k"` is 100, `"1e3"` is refused, `"1e3k"` is 1e6).
tests/dataloaders/mosaic/test_mosaic_fields.py compares it with the library's own function.
"""

from __future__ import annotations

_UNITS = {"k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def number_abbrev_to_int(abbrev: int | float | str) -> int:
    """The int streaming makes of `abbrev` (util.py:125-166); ValueError where it raises."""
    if isinstance(abbrev, int | float):
        return int(abbrev)
    for suffix, unit in _UNITS.items():
        abbrev = abbrev.lower().strip()
        if abbrev.lower().endswith(suffix):
            try:
                return int(float(abbrev[0 : -len(suffix)]) * unit)
            except ValueError:
                raise ValueError(
                    f"unsupported value/suffix {abbrev!r} (streaming takes a number with k, m, "
                    "b or t)"
                ) from None
    if abbrev.isdigit():
        return int(abbrev)
    raise ValueError(
        f"unsupported value/suffix {abbrev!r} (streaming takes a number with k, m, b or t)"
    )


def epoch_size_value(epoch_size: int | float | str | None) -> int | None:
    """StreamingDataset's epoch size (dataset.py:421-425): a falsy value (None, 0, "") means
    none; a negative one is refused; 0 after parsing (`"0k"`) also means none, since
    Stream.apply_weights treats a falsy choose_per_epoch as unset (stream.py:249, 259, 272)."""
    if isinstance(epoch_size, bool):
        raise ValueError(f"epoch_size must be a number or a string like '4k', got {epoch_size!r}")
    if not epoch_size:
        return None
    value = number_abbrev_to_int(epoch_size)
    if value < 0:
        raise ValueError(f"epoch size cannot be negative, got {value} (streaming's rule)")
    return value or None
