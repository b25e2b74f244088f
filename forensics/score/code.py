"""Code-likeness of a document: how much of it is laid out like program source.

Why: source code is a normal pretraining domain (The Stack, GitHub), and its identifiers repeat
the way a doorway page repeats its keyword (`self` is 13% of a method's words, `hidden_states`
recurs every few words). Keyword stuffing and n-gram coverage are natural-language signals, so
they are weighed by how *prose-like* a page is. Three layout statistics that natural-language
pages (including spam farms, doorway pages and menus) lack and code has, each measured on the
whole column in polars:

- symbol density: brackets, operators, underscores, `#`, `@`, backticks per visible character
  (prose ~1-7%, code ~6-20%; doorway and template pages under 6%);
- code line endings: share of lines ending in `:`, `{`, `}`, `(`, `)`, `[`, `]`, `;`, `,` or `\\`;
- indentation: share of lines starting with four spaces or a tab.
"""

from __future__ import annotations

import numpy as np
import polars as pl

SYMBOLS = r"[(){}\[\]=<>;_*/\\#@$&|^~%+`]"
CODE_LINE_END = r"[:{}\[\]();,\\]$"
INDENTED = r"^(?:    |\t)"
# Weighted mix of the three statistics (code: 0.27-0.55, spam kinds: under 0.05, prose
# documentation with examples in between); prose-likeness falls from 1 to 0 across this band.
WEIGHTS = (0.5, 0.25, 0.25)
PROSE_UNTIL = 0.10
CODE_FROM = 0.25


def code_line_exprs(line: pl.Expr) -> dict[str, pl.Expr]:
    """Per-line flags (on the raw line, before stripping) for `_line_stats` to sum."""
    return {
        "code_end": line.str.strip_chars_end().str.contains(CODE_LINE_END),
        "indented": line.str.contains(INDENTED),
    }


def code_likeness(
    symbols: np.ndarray,
    visible: np.ndarray,
    code_end_lines: np.ndarray,
    indented_lines: np.ndarray,
    n_lines: np.ndarray,
) -> np.ndarray:
    """Code-likeness in [0, ~0.6] per document from the counts above."""
    lines = np.maximum(n_lines, 1)
    parts = (
        symbols / np.maximum(visible, 1),
        code_end_lines / lines,
        indented_lines / lines,
    )
    return sum(w * p for w, p in zip(WEIGHTS, parts, strict=True))


def prose_likeness(code: np.ndarray) -> np.ndarray:
    """1 for natural-language layout, 0 for code, linear in between."""
    return 1.0 - np.clip((code - PROSE_UNTIL) / (CODE_FROM - PROSE_UNTIL), 0.0, 1.0)
