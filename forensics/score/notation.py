"""A repeated word that is part of a page's notation, not a stuffed phrase.

The keyword rules (`spam.py`: `keyword`, a page's top word in many short phrases;
`keyword_density`, the top word every few words) look at how often one word comes back. Two kinds
of clean reference text repeat a word as often, and differ from a stuffed page in where it sits:

- notation: a function reference repeats its type names in signatures (``lower(text) -> text``,
  ``double precision``), a settings reference its role (``:setting:`DEBUG```), a manual its
  command inside paths and compounds (``/var/lib``, ``apt-get``, ``ssh-keygen``) and on the
  command lines it shows (``$ git config --global user.name``). The word touches markup or
  code punctuation, or stands on a line opened by a shell prompt. A stuffed page repeats a
  commercial phrase as plain words ("cheap flights, flights online, best cheap flights");
- scripts written without spaces: in a Chinese or Japanese page, a run of Han or kana is one
  `\\w+` token however long it is, so a Latin command name (`apt`, `git`, `ssh`) looks like 14% of
  the "words" and every clause looks short. Counted the way such text is read (about two
  characters a word), the name is a few per cent of the page.

`reference_keyword` says, for a flagged page and its keyword, whether either holds; `spam.py`
then waives the keyword rules for that page only. The other rules are unchanged.
"""

from __future__ import annotations

import re

# Characters that make the nearest word on either side (spaces between allowed: "( text )",
# "-> text") part of markup, a signature or a path.
_MARKUP = set("`()[]{}<>=_/\\|*#@$%~\"'→")
# These join a word to its neighbour only when they touch both ("os.path", "apt-get",
# ":setting:"): beside a space they are sentence punctuation, a dash or a label's colon.
_JOINERS = set(".-:")
# Han, kana, Hangul: scripts whose words are not separated by spaces (Hangul is, but its
# tokens are long; counting it here only lengthens clauses, which is right for it too).
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_CJK_WORD_CHARS = 2  # characters per word in Chinese and Japanese text, roughly
_CLAUSE = re.compile(r"[^,.;:!?\n|，。；：！？、]+")
_WORD = re.compile(r"\w+")
# A shell prompt opening a line ("$ git config --global ...", "# apt install ..."): the words on
# that line are a command and its arguments, which a manual repeats as often as it runs them.
_PROMPT = re.compile(r"[ \t]*[$#%] ")
# Share of the keyword's occurrences that must touch notation for the page to be reference text.
NOTATION_SHARE = 0.5
# A whitespace-delimited chunk of notation: markup (backticks, roles, links, brackets), a path or
# URL, or words joined by "." or ":" (``django.views.generic.edit``, ``1.2:``, ``os.path``).
NOTATION_CHUNK = r"\S*(?:[`~<>\[\]{}=/\\|]|\w[.:]\w)\S*"


def _occurrences(text: str, kw: str) -> list[re.Match[str]]:
    # ASCII boundaries: in "使用apt命令" the name touches Han letters, which are \w too.
    return list(re.finditer(rf"(?<![A-Za-z0-9_]){re.escape(kw)}(?![A-Za-z0-9_])", text, re.I))


def _nearest(text: str, i: int, step: int) -> str:
    """The first character from `i` in direction `step` that is not a space or tab."""
    while 0 <= i < len(text) and text[i] in " \t":
        i += step
    return text[i] if 0 <= i < len(text) else "\n"


def _on_command_line(text: str, a: int) -> bool:
    """Whether position `a` is on a shell command line: one that opens with a prompt."""
    start = text.rfind("\n", 0, a) + 1
    return _PROMPT.match(text, start) is not None


def _in_notation(text: str, a: int, b: int) -> bool:
    if _nearest(text, a - 1, -1) in _MARKUP or _nearest(text, b, 1) in _MARKUP:
        return True
    if _on_command_line(text, a):
        return True
    after = text[b] if b < len(text) else " "
    if after in _JOINERS and b + 1 < len(text) and not text[b + 1].isspace():
        return True
    before = text[a - 1] if a > 0 else " "
    return before in _JOINERS and a > 1 and not text[a - 2].isspace()


def notation_share(text: str, kw: str) -> float:
    """Share of the keyword's occurrences that touch markup, code punctuation or a path."""
    occ = _occurrences(text, kw)
    if not occ:
        return 0.0
    return sum(_in_notation(text, m.start(), m.end()) for m in occ) / len(occ)


def _words(s: str) -> float:
    """Words in `s`, a run of Han or kana counted as one word per two characters."""
    cjk = len(_CJK.findall(s))
    if not cjk:
        return float(len(_WORD.findall(s)))
    latin = len(_WORD.findall(_CJK.sub(" ", s)))
    return latin + cjk / _CJK_WORD_CHARS


def spaced_density(text: str, kw: str) -> float:
    """The keyword's share of words, Chinese and Japanese counted by characters."""
    return len(_occurrences(text, kw)) / max(_words(text), 1.0)


def spaced_phrase_share(text: str, kw: str, short: int) -> float:
    """Share of clauses that hold the keyword and are at most `short` words long, clauses cut at
    full-width punctuation too and words counted as `_words` does."""
    clauses = [c for c in _CLAUSE.findall(text) if _WORD.search(c)]
    if not clauses:
        return 0.0
    pattern = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(kw)}(?![A-Za-z0-9_])", re.I)
    hits = sum(1 for c in clauses if _words(c) <= short and pattern.search(c))
    return hits / len(clauses)


def has_cjk(text: str) -> bool:
    return _CJK.search(text) is not None
