"""Make hostile document text safe to show.

Crawled garbage contains ANSI escape sequences (which can rewrite a terminal), C0/C1 control
characters, bidi overrides and `<script>` tags. Anything derived from document text goes through
`terminal_safe` before rich prints it, through `html_safe` before it lands in HTML, and through
`md_safe` (`fence_safe` inside a ~~~ fence) before it lands in Markdown.
"""

from __future__ import annotations

import html
import re

# CSI / OSC / other ESC sequences, then any remaining C0/C1 control or bidi/format override.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|~>])")


def excerpt(text: str | None, max_chars: int = 300) -> str:
    """Cap an excerpt's length and neutralise control characters (shown as U+FFFD-like marks)."""
    if not text:
        return ""
    text = _ANSI.sub("\u241b", text)  # ␛ stands in for an escape sequence
    text = _CONTROL.sub("\ufffd", text)
    text = " ".join(text.split())
    if len(text) > max_chars:
        text = text[: max_chars - 1] + "\u2026"
    return text


def terminal_safe(text: str | None, max_chars: int = 300) -> str:
    """Excerpt for a terminal; also escapes rich markup so `[bold]` in a document stays literal."""
    from rich.markup import escape

    return escape(excerpt(text, max_chars))


def md_code(text: str | None, max_chars: int = 300) -> str:
    """A Markdown code span that shows `text` as written. A code span takes no escapes (a
    backslash or an entity there shows literally), so the text goes in raw, fenced by one more
    backtick than its longest run of them; HTML inside a code span is text."""
    body = excerpt(text, max_chars) or " "
    fence = "`" * (max((len(run) for run in re.findall(r"`+", body)), default=0) + 1)
    pad = " " if body.startswith("`") or body.endswith("`") else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def html_safe(text: str | None, max_chars: int = 300) -> str:
    """Excerpt for HTML: `<script>` becomes `&lt;script&gt;`."""
    return html.escape(excerpt(text, max_chars), quote=True)


def md_safe(text: object, max_chars: int = 300) -> str:
    """Inert Markdown text, escaped once: `<`, `>`, `&` as entities (quotes stay quotes: an
    entity's `#` would be backslash-escaped and show literally), Markdown punctuation
    backslash-escaped, one line."""
    return _MD_SPECIAL.sub(r"\\\1", html.escape(excerpt(str(text), max_chars), quote=False))


def fence_safe(text: object, max_chars: int = 2000) -> str:
    """Text for inside a ~~~ fence: no control characters, no fence markers."""
    return excerpt(str(text), max_chars).replace("~~~", "~ ~ ~").replace("```", "` ` `")
