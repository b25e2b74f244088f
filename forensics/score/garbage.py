"""Encoding-garbage score: how much of a document is mojibake, control bytes or binary junk.

Design (why it looks like this):
- Evidence is counted with polars regexes over 512-character chunks of every document, so the
  hot path is native and parallel, and each chunk's density is known. A chunk whose count
  reaches the signal's `chunk_floor` is "corrupted"; the document's corrupted fraction is the
  share of its characters in corrupted chunks. Scoring by that fraction (not by whole-document
  density) is what lets one broken paragraph in a 3,000-character page, or in a 10 MB file, still
  be caught: its chunks are dense even when the document average is not.
- Each signal also has a `doc_floor`: the total evidence below which it is treated as noise
  (a single U+FFFD, one stray form feed, one icon-font private-use glyph).
- Mojibake from UTF-8 read as cp1252/latin-1 (and everything else ftfy knows) uses ftfy's own
  heuristic (`ftfy.badness`) plus an exact "lead byte + continuation bytes" pattern; UTF-8 read as
  GBK / Shift-JIS / Big5 / EUC-KR is undone byte-wise in `legacy_codecs`.

Score: a flagged signal scores 0.5 + 0.5 * min(1, corrupted_fraction / 0.3); an unflagged one
scores below 0.5 in proportion to its evidence. The document's score is the maximum.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache

import numpy as np
import polars as pl

from forensics.safe_text import excerpt
from forensics.score import patterns as P
from forensics.score.legacy_codecs import (
    CODEC_NAMES,
    SEGMENT_MIN_CHARS,
    SEGMENT_SHARE,
    LegacyEvidence,
    legacy_evidence_all,
)
from forensics.score.locate import legacy_runs_all
from forensics.score.mixed_script import MixedScriptWords
from forensics.score.utf8_scan import (
    HAS_CONTROL,
    HAS_EAST_ASIAN,
    HAS_FFFD,
    HAS_LATIN1_LEAD,
    char_groups,
)

CHUNK_CHARS = 512
# Corrupted fraction at which a flagged signal's score saturates at 1.0.
FULL_FRACTION = 0.3


@dataclass(frozen=True)
class Signal:
    """One countable kind of evidence.

    `chunk_floor`: matches within one 512-character chunk that make the chunk corrupted.
    `doc_floor`: matches in the whole document below which the signal is noise.
    """

    name: str
    pattern: str
    chunk_floor: int
    doc_floor: int


@cache
def signals() -> tuple[Signal, ...]:
    """The signals, built on first use: ftfy's heuristic comes from importing ftfy, which a
    command that scores nothing should not pay for."""
    return (
        Signal("utf8_as_cp1252", P.UTF8_AS_CP1252, 1, 2),
        Signal("ftfy", P.ftfy_badness_pattern(), 1, 3),
        Signal("c0", P.C0_CONTROLS, 3, 4),
        # A control character between two letters is never text: one is evidence.
        Signal("ctrl_in_word", P.CONTROL_IN_WORD, 1, 1),
        Signal("cp1252_in_word", P.UTF8_AS_CP1252_IN_WORD, 1, 1),
        Signal("c1", P.C1_CONTROLS, 3, 4),
        Signal("fffd", P.REPLACEMENT, 2, 3),
        Signal("pua", P.PRIVATE_OR_UNASSIGNED_RS, 3, 4),
    )


# Order in which a flagged signal names the reason: the most specific explanation first.
_PRIORITY = (
    "legacy", "mixed_script", "c0", "utf8_as_cp1252", "cp1252_in_word", "ftfy", "fffd", "c1",
    "ctrl_in_word", "pua",
)  # fmt: skip
MIXED = MixedScriptWords()
# The character a pattern cannot match without (a `utf8_scan.char_groups` bit); patterns not
# named (ftfy's heuristic, private-use / unassigned) run on every page that is not plain ASCII.
_GATES = {
    "c0": HAS_CONTROL, "ctrl_in_word": HAS_CONTROL, "c1": HAS_CONTROL,
    "nul": HAS_CONTROL, "utf16": HAS_CONTROL,
    "utf8_as_cp1252": HAS_LATIN1_LEAD, "cp1252_in_word": HAS_LATIN1_LEAD,
    "fffd": HAS_FFFD, "two_east_asian": HAS_EAST_ASIAN, "mixed_candidates": HAS_EAST_ASIAN,
}  # fmt: skip
_AUX = {
    "nul": P.NUL,
    "utf16": P.UTF16_INTERLEAVED,
    "two_east_asian": f"(?s){P.EAST_ASIAN_RS}.*?{P.EAST_ASIAN_RS}",
    "mixed_candidates": MixedScriptWords.pattern,
}
# Auxiliary patterns read only as "is there a match": counted 1 or 0 (the search stops at the
# first match instead of counting every Han character of a Chinese page).
_PRESENCE = ("two_east_asian", "mixed_candidates")


def _gated_counts(frame: pl.DataFrame, groups: np.ndarray) -> pl.DataFrame:
    """`doc` and every pattern's match count (`<name>_n`; 1 or 0 for `_PRESENCE`), each
    pattern run only on the rows whose `utf8_scan.char_groups` bits say it can match
    (`_GATES`); the others count 0."""
    patterns = {s.name: s.pattern for s in signals()} | _AUX
    out = frame.select("doc")
    for bit in sorted(set(_GATES.get(k, 0) for k in patterns)):
        names = [k for k in patterns if _GATES.get(k, 0) == bit]
        rows = frame.filter(pl.Series((groups & bit) != 0 if bit else np.ones(len(groups), bool)))
        counts = rows.select(
            "doc",
            *[
                (
                    pl.col("text").str.contains(patterns[k]).cast(pl.UInt32)
                    if k in _PRESENCE
                    else pl.col("text").str.count_matches(patterns[k])
                ).alias(f"{k}_n")
                for k in names
            ],
        )
        out = out.join(counts, on="doc", how="left")
    return out.with_columns(pl.exclude("doc").fill_null(0))


def _chunk_counts(texts: pl.Series) -> pl.DataFrame:
    """Per document (row order kept): n_chars, and per signal the total and corrupted characters.

    Columns: `n_chars`; `<sig>_n` (matches in the document); `<sig>_chars` (characters in chunks
    at or above the chunk floor); `nul_n`, `utf16_n`; `two_east_asian_n` and
    `mixed_candidates_n` (1 when the page holds two East Asian characters, or a Latin letter
    glued to one; else 0).
    Whole documents are counted first; only those with some evidence (a few percent of a real
    crawl) are cut into chunks to locate it.
    """
    frame = pl.DataFrame({"text": texts}).with_row_index("doc")
    n_chars = frame.select(pl.col("text").str.len_chars().fill_null(0))["text"]
    frame = frame.with_columns(
        pl.when(pl.col("text").str.contains(r"[\x00\x0C]"))
        .then(pl.col("text").str.replace_all(P.FORMAT_CONTROLS, ""))
        .otherwise(pl.col("text"))
    )
    # Every pattern needs a character outside printable ASCII (tab, LF and CR excepted), so
    # plain-ASCII documents skip the regex passes; their counts are zero.
    plain = frame.select(
        pl.col("text").str.contains(r"[^\x09\x0A\x0D\x20-\x7E]").not_().fill_null(True)
    ).to_series()
    names = [f"{s.name}_n" for s in signals()] + [f"{n}_n" for n in _AUX]
    counted = _gated_counts(frame.filter(~plain), char_groups(texts).take(np.flatnonzero(~plain)))
    whole = (
        frame.select("doc", n_chars.alias("n_chars"))
        .join(counted, on="doc", how="left")
        .with_columns(pl.col(c).fill_null(0) for c in names)
    )
    return _corrupted_chars(frame, whole)


def _corrupted_chars(frame: pl.DataFrame, whole: pl.DataFrame) -> pl.DataFrame:
    """`whole` with `<sig>_chars`: the characters of the document's 512-character chunks in
    which the signal reaches its chunk floor. Only documents with evidence are cut into chunks,
    and each signal counts only the chunks of documents where it matched at all (no pattern
    anchors or looks around, so a chunk matches only where the whole document does)."""
    evidence = pl.any_horizontal([pl.col(f"{s.name}_n") > 0 for s in signals()])
    suspects = whole.filter(evidence).select("doc", *[f"{s.name}_n" for s in signals()])
    if suspects.height == 0:
        whole = whole.with_columns(pl.lit(0).alias(f"{s.name}_chars") for s in signals())
        return whole.sort("doc").with_columns(pl.exclude("doc").fill_null(0).cast(pl.Int64))
    chunks = (
        frame.join(suspects, on="doc")
        .select(
            "doc",
            *[f"{s.name}_n" for s in signals()],
            pl.col("text").str.extract_all(rf"(?s).{{1,{CHUNK_CHARS}}}").alias("chunk"),
        )
        .explode("chunk")
        .with_columns(pl.col("chunk").str.len_chars().fill_null(0).alias("len"))
    )
    for s in signals():
        found = (
            chunks.lazy()
            .filter(pl.col(f"{s.name}_n") > 0)
            .select("doc", "len", pl.col("chunk").str.count_matches(s.pattern).alias("m"))
            .group_by("doc")
            .agg(pl.col("len").filter(pl.col("m") >= s.chunk_floor).sum().alias(f"{s.name}_chars"))
            .collect()
        )
        whole = whole.join(found, on="doc", how="left")
    return whole.sort("doc").with_columns(pl.exclude("doc").fill_null(0).cast(pl.Int64))


def _signal_scores(total: np.ndarray, chars: np.ndarray, n_chars: np.ndarray, floor: int):
    """Score one signal for all documents; also return whether it is flagged."""
    frac = np.divide(chars, np.maximum(n_chars, 1))
    flagged = (total >= floor) & (chars > 0)
    score = np.where(
        flagged,
        0.5 + 0.5 * np.minimum(1.0, frac / FULL_FRACTION),
        0.45 * np.minimum(1.0, total / floor),
    )
    return score, flagged, frac


def _show(s: str) -> str:
    """An example for a reason string: invisible and hostile characters written as escapes."""
    out = []
    for ch in s:
        cat = unicodedata.category(ch)
        if cat[0] == "C" or ch == "\ufffd":
            out.append(f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return excerpt("".join(out), 24)


def _first(pattern: str, text: str) -> str:
    m = re.search(pattern, text)
    return m.group(0) if m else ""


def _first_pua(text: str) -> str:
    for ch in text:
        if unicodedata.category(ch) in ("Co", "Cn"):
            return ch
    return ""


def _cp1252_reason(text: str, n: int) -> str:
    """Name the decoding mistake: 'double-encoded' when undoing it once still leaves mojibake."""
    example = _first(P.UTF8_AS_CP1252, text)
    label = "UTF-8 decoded as cp1252"
    m = re.search(f"(?:{P.UTF8_AS_CP1252}){{2,}}", text)
    if m:
        seg = m.group(0)
        for codec in ("cp1252", "latin-1"):
            try:
                once = seg.encode(codec).decode("utf-8")
            except UnicodeError:
                continue
            if re.search(P.UTF8_AS_CP1252, once):
                label = "double-encoded UTF-8 (decoded as cp1252 twice)"
                example = seg
            elif codec == "latin-1":
                label = "UTF-8 decoded as latin-1"
            break
    return f"{label}: {n} sequences like '{_show(example)}'"


def _ftfy_reason(text: str, n: int) -> str:
    from ftfy.badness import BADNESS_RE

    m = BADNESS_RE.search(text)
    example = text[max(0, m.start() - 2) : m.end() + 2] if m else ""
    return f"mojibake (ftfy badness): {n} suspicious sequences like '{_show(example)}'"


def _pct(frac: float) -> str:
    return f"{100 * frac:.0f}%" if frac >= 0.01 else "<1%"


def _signal_columns(c: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """Per `Signal`: its score for every document and its corrupted fraction (`_signal_scores`)."""
    scores: dict[str, np.ndarray] = {}
    fracs: dict[str, np.ndarray] = {}
    for s in signals():
        scores[s.name], _, fracs[s.name] = _signal_scores(
            c[f"{s.name}_n"], c[f"{s.name}_chars"], c["n_chars"], s.doc_floor
        )
    return scores, fracs


def _legacy_column(texts: pl.Series, c: dict[str, np.ndarray]) -> tuple[np.ndarray, dict]:
    """Rule `legacy`: whole blocks of UTF-8 read as GBK / Shift-JIS / Big5 / EUC-KR.

    Only for documents with at least two East Asian characters, all re-encoded together
    (`legacy_evidence_all`, `legacy_runs_all`). Returns (score per document,
    {row: (evidence, fraction of text)} for flagged rows).
    """
    score = np.zeros(len(texts))
    info: dict[int, tuple] = {}
    candidates = np.flatnonzero(c["two_east_asian_n"] > 0)
    candidate_texts = texts.gather(candidates).to_list() if len(candidates) else []
    evidence = legacy_evidence_all(candidate_texts)
    # A few damaged sentences among clean blocks: pages where no block is mostly mojibake.
    partly = [k for k, ev in enumerate(evidence) if ev.recovered_bytes and not ev.segments]
    runs = legacy_runs_all(
        [candidate_texts[k] for k in partly], [(evidence[k].codec,) for k in partly]
    )
    sentences = dict(zip(partly, runs, strict=True))
    for k, (i, ev) in enumerate(zip(candidates, evidence, strict=True)):
        if ev.recovered_bytes == 0:
            continue
        n_chars = max(int(c["n_chars"][i]), 1)
        if ev.segments:
            frac = ev.segment_chars / n_chars
            score[i] = 0.5 + 0.5 * min(1.0, frac / FULL_FRACTION)
            info[int(i)] = (ev, frac)
        elif (found := _legacy_sentences(candidate_texts[k], *sentences[k])) is not None:
            frac = found.segment_chars / n_chars
            score[i] = 0.5 + 0.5 * min(1.0, frac / FULL_FRACTION)
            info[int(i)] = (found, frac)
        else:
            share = ev.recovered_bytes / max(ev.candidate_bytes, 1)
            score[i] = 0.45 * min(1.0, share / SEGMENT_SHARE)
    return score, info


def _legacy_sentences(text: str, codec: str, runs: list[tuple[int, int]]) -> LegacyEvidence | None:
    """A few damaged sentences among clean blocks: no block is mostly mojibake, but runs that
    re-encode in full with `codec` (the one that recovered most bytes over the blocks;
    `locate.legacy_runs`) hold at least SEGMENT_MIN_CHARS characters."""
    chars = sum(b - a for a, b in runs)
    if not codec or chars < SEGMENT_MIN_CHARS:
        return None
    a, b = max(runs, key=lambda r: r[1] - r[0])
    raw = text[a:b].encode(codec, errors="ignore")
    example = (text[a:b][:12], raw.decode("utf-8", errors="replace")[:12])
    return LegacyEvidence(codec, 0, 0, len(runs), chars, len(runs), example)


def _mixed_column(texts: pl.Series, c: dict[str, np.ndarray]) -> tuple[np.ndarray, dict]:
    """Rule `mixed_script`: Latin words with a legacy-decoded CJK span that re-encodes back.

    Only documents with a Latin letter glued to CJK; one undone word flags the document, more
    of them raise the score. Returns (score per document, {row: words} for flagged rows).
    """
    score = np.zeros(len(texts))
    info: dict[int, list] = {}
    candidates = np.flatnonzero(c["mixed_candidates_n"] > 0)
    if len(candidates) == 0:
        return score, info
    for i, words in zip(candidates, MIXED.find_all(texts.gather(candidates)), strict=True):
        if words:
            score[i] = min(1.0, 0.55 + 0.05 * len(words))
            info[int(i)] = words
    return score, info


def _best_signal(matrix: np.ndarray, names: list[str], c: dict[str, np.ndarray]) -> np.ndarray:
    """Column index of the signal each document's reason names: the most specific flagged one
    (`_PRIORITY`), not merely the highest score."""
    priority = np.array([_PRIORITY.index(k) for k in names])
    ranked = np.where(matrix >= 0.5, priority[None, :], len(_PRIORITY))
    best = ranked.argmin(axis=1)
    # ftfy's heuristic also matches pairs of U+FFFD: when those are most of what it saw, the
    # replacement characters are the better explanation.
    i_ftfy, i_fffd = names.index("ftfy"), names.index("fffd")
    fffd_wins = (best == i_ftfy) & (matrix[:, i_fffd] >= 0.5) & (c["fffd_n"] >= c["ftfy_n"])
    best[fffd_wins] = i_fffd
    return best


def score_garbage(texts: pl.Series) -> pl.DataFrame:
    """Score each text for encoding garbage.

    Returns a DataFrame with one row per input row (order kept): `garbage_score` (Float64 in
    [0, 1]; >= 0.5 means flagged), `garbage_reason` (Utf8, "" when not flagged) and
    `garbage_rule` (the machine-readable key of the signal the reason names: a `Signal` name,
    "legacy", "mixed_script", "binary_junk" or "utf16"; "" when not flagged). Null texts score
    0.0 with reason "".
    """
    texts = texts.cast(pl.Utf8)
    frame = _chunk_counts(texts)
    c = {k: frame[k].to_numpy() for k in frame.columns}  # numpy: reasons index it per row
    scores, fracs = _signal_columns(c)
    scores["legacy"], legacy_info = _legacy_column(texts, c)
    scores["mixed_script"], mixed_info = _mixed_column(texts, c)
    names = list(scores)
    matrix = np.column_stack([scores[k] for k in names])
    final = matrix.max(axis=1)
    final[c["n_chars"] == 0] = 0.0
    best = _best_signal(matrix, names, c)
    reasons = [""] * len(texts)
    keys = [""] * len(texts)
    flagged_rows = np.flatnonzero(final >= 0.5)
    flagged_texts = texts.gather(flagged_rows).to_list() if len(flagged_rows) else []
    for i, text in zip(flagged_rows, flagged_texts, strict=True):
        keys[i] = names[best[i]]
        if keys[i] == "mixed_script":
            reasons[i] = MIXED.reason(mixed_info[int(i)])
            continue
        reasons[i] = _reason(text, keys[i], c, int(i), fracs, legacy_info)
        # The combined explanations `_reason` may give get keys of their own.
        if reasons[i].startswith("binary junk"):
            keys[i] = "binary_junk"
        elif reasons[i].startswith("UTF-16"):
            keys[i] = "utf16"
    return pl.DataFrame(
        {
            "garbage_score": np.clip(final, 0.0, 1.0).astype(np.float64),
            "garbage_reason": pl.Series(reasons, dtype=pl.Utf8),
            "garbage_rule": pl.Series(keys, dtype=pl.Utf8),
        }
    )


def _legacy_reason(ev, frac: float) -> str:
    """Blocks, an example run (when one run recovers on its own) and the share of text."""
    runs = ""
    if ev.example is not None:
        bad, good = ev.example
        runs = f", runs like '{_show(bad)}' (re-encoded: '{_show(good)}')"
    codec = CODEC_NAMES[ev.codec]
    unit = "blocks" if ev.candidate_bytes else "runs"
    return f"UTF-8 decoded as {codec}: {ev.segments} {unit}{runs}, {_pct(frac)} of text"


def _reason(text: str, signal: str, c: dict, i: int, fracs: dict, legacy: dict) -> str:
    """One short human-readable line for the strongest signal of document `i`.

    `c`: the `_chunk_counts` columns as numpy arrays.
    """
    if signal == "legacy":
        return _legacy_reason(*legacy[i])
    n = int(c[f"{signal}_n"][i])
    frac = float(fracs[signal][i])
    where = f", {_pct(frac)} of text"
    junk_kinds = ("c0", "c1", "fffd", "pua")
    if sum(int(c[f"{k}_chars"][i]) > 0 for k in junk_kinds) >= 2:
        junk = sum(int(c[f"{k}_n"][i]) for k in junk_kinds)
        frac = max(float(fracs[k][i]) for k in junk_kinds)
        if int(c["utf16_n"][i]) > 0 and int(c["nul_n"][i]) * 4 >= junk:
            nul = int(c["nul_n"][i])
            return f"UTF-16 text read as 8-bit: {nul} interleaved NULs, {_pct(frac)} of text"
        what = "control, replacement or private-use characters"
        return f"binary junk: {junk} {what}, {_pct(frac)} of text"
    if signal == "utf8_as_cp1252":
        return _cp1252_reason(text, n) + where
    if signal == "ftfy":
        return _ftfy_reason(text, n) + where
    if signal == "c0":
        if int(c["utf16_n"][i]) > 0:
            return f"UTF-16 text read as 8-bit: {int(c['nul_n'][i])} interleaved NULs{where}"
        nul = int(c["nul_n"][i])
        ex = _first(P.C0_CONTROLS, text)
        return f"{n} C0 control characters ({nul} NUL) like '{_show(ex)}'{where}"
    if signal == "ctrl_in_word":
        ex = _first(P.CONTROL_IN_WORD, text)
        return f"{n} control characters inside words like '{_show(ex)}'{where}"
    if signal == "cp1252_in_word":
        ex = _first(P.UTF8_AS_CP1252_IN_WORD, text)
        return f"UTF-8 decoded as cp1252 inside words: {n} like '{_show(ex)}'{where}"
    if signal == "c1":
        return f"{n} C1 control characters like '{_show(_first(P.C1_CONTROLS, text))}'{where}"
    if signal == "fffd":
        return f"{n} U+FFFD replacement characters (lossy decode){where}"
    if signal == "pua":
        return f"{n} private-use or unassigned code points like '{_show(_first_pua(text))}'{where}"
    return signal
