"""Licence and copyright notices: text whose repetition is its form, not spam.

Why: a Debian `copyright` file (DEP-5) states one licence once per `Files:` stanza, so its lines
and 6-grams repeat (the MIT text three times over), it is full of "copyright" lines that the
navigation-boilerplate rule reads as site chrome, and the files of one upstream's packages share
a skeleton that differs in names and years only, like a slot-filled template. On this machine
13% of the 735 files under /usr/share/doc/*/copyright scored as spam for those reasons.

What marks such a text is the pair a notice is made of: a copyright statement and a licence
grant or disclaimer in the licences' own fixed wording. Spam pages copy footers ("© 2024 ...
All rights reserved"), not licence grants, so a page needs both to count as a notice, or must
open with the grant (a bare licence file). Only the repetition, boilerplate and skeleton
signals are waived for it; its keyword, doorway and link-farm rules still apply.
"""

from __future__ import annotations

import numpy as np
import polars as pl

# A copyright statement: "Copyright (C) 2001", "Copyright: 2019 ...", "Copyright 1998", "©".
COPYRIGHT = r"(?i)copyright\s*(?:\(c\)|©|:|\d{4})|©"
# The fixed wording of the common licences' grants and disclaimers (and the DEP-5 header).
GRANT = (
    r"Permission is hereby granted|(?i:permission to use, copy, modify)"
    r"|Redistribution and use in source and binary forms"
    r"|(?i:GNU (?:Lesser |Library |Affero )?General Public License)"
    r"|Licensed under the Apache License|(?i:Mozilla Public License)"
    r"|This (?:program|library|file) is free software"
    r"|THE SOFTWARE IS PROVIDED|WITHOUT ANY WARRANTY|(?i:provided \"as is\")"
    r"|(?i:disclaims? (?:any|all) warranties)"
    r"|(?m:^Format: https?://www\.debian\.org/doc/packaging-manuals/copyright-format)"
    r"|(?m:^License: \S)"
)


# A text that opens with a grant (a bare licence file without its holder line) is a licence.
OPENING = 300


def is_licence(texts: pl.Series, rows: np.ndarray) -> np.ndarray:
    """bool [len(rows)]: which of `texts[rows]` are licence or copyright notices: a copyright
    statement and a licence grant or disclaimer both present, or a grant in the first
    OPENING characters (a licence's text on its own)."""
    if len(rows) == 0:
        return np.zeros(0, dtype=bool)
    sub = texts.cast(pl.Utf8).gather(rows)
    opens_with_grant = sub.str.slice(0, OPENING).str.contains(GRANT)
    both = sub.str.contains(COPYRIGHT) & sub.str.contains(GRANT)
    return (both | opens_with_grant).fill_null(False).to_numpy()
