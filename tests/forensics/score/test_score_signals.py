"""The scoring signals, each with the clean look-alike it must leave alone.

- mixed-script words (one name read as GBK / Shift-JIS / EUC-KR inside Latin text) vs a
  Japanese word in an English sentence, Chinese text with commands glued to Han, Japanese with
  Latin glued to kana, a Han character glued to a capital that gives back a yen sign;
- UTF-8 read as GBK in blocks vs Chinese headings that give back 60% of their bytes by chance
  (what comes back is not text), and mojibake that gives back only part of its bytes;
- controls inside words vs a format's own controls (Info index markers, form-feed lines);
- cp1252 mojibake glued to a word vs uppercase Portuguese;
- doorway pages (a keyword forced into varied sentence frames) vs a function reference table
  and a generated symbol list where one word recurs in every line, and vs a library's own
  reference page that names its subject in every sentence at varied positions.
Documents are built here, not taken from the benchmark's sets.
"""

from __future__ import annotations

import random

import polars as pl

from forensics.score import FLAG_THRESHOLD, score_table
from forensics.score.doorway import DoorwayFrames
from forensics.score.mixed_script import MixedScriptWords

PROSE = [
    "The scheduler assigns each job to the least loaded worker and records the decision.",
    "When a worker fails, its jobs return to the queue with their retry count incremented.",
    "The operator sees one line per failure in the log, with the time and the host name.",
    "A restart replays the recorded decisions so that no job runs twice on the same data.",
    "Configuration is read once at startup from a file in the user's home directory.",
    "Each request carries a deadline, and the server drops work whose deadline has passed.",
    "The cache keeps the most recent results in memory and writes older ones to disk.",
    "Metrics are exported every ten seconds and kept for a week on the monitoring host.",
    "Long reports are split into pages, and each page starts with a short summary table.",
    "The command line tool prints a usage message when it is called without arguments.",
    "Backups run at night, when the load is low and the network is mostly idle anyway.",
    "A lock file prevents two copies of the daemon from writing to the same directory.",
    "The parser accepts comments that start with a hash sign and run to the end of line.",
    "Old log files are compressed after a day and removed after a month by a cron job.",
]
ENGLISH = " ".join(PROSE) + "\n"


def _score(texts: list[str]) -> pl.DataFrame:
    return score_table(pl.DataFrame({"text": texts}, schema={"text": pl.Utf8}))


def _flagged(out: pl.DataFrame, family: str) -> list[bool]:
    return (out[f"{family}_score"] >= FLAG_THRESHOLD).to_list()


def _name_as(codec: str, name: str = "António Guterres") -> str:
    return name.encode("utf-8").decode(codec, errors="replace")


# ---------------------------------------------------------------- mixed-script words


def test_one_name_read_as_a_legacy_codec_is_flagged() -> None:
    docs = [
        f"{ENGLISH}The report was presented by {_name_as(codec)} at the meeting.\n{ENGLISH}"
        for codec in ("gbk", "shift_jis", "euc_kr", "big5")
    ]
    assert "Ant贸nio" in docs[0] and "Antﾃｳnio" in docs[1]
    out = _score(docs)
    assert all(_flagged(out, "garbage")), out
    reasons = out["garbage_reason"].to_list()
    assert "GBK inside Latin words" in reasons[0] and "António" in reasons[0]
    assert "Shift-JIS" in reasons[1]


def test_mixed_script_clean_look_alikes_are_not_flagged() -> None:
    docs = [
        # A Japanese word in an English sentence (spaces around it).
        f"{ENGLISH}The word 日本語 means Japanese, and 東京 is its capital.\n{ENGLISH}",
        # Chinese manual text with commands glued to Han characters.
        "使用ls和cat命令查看文件。在upgrade之前请备份数据，然后运行X服务器。" * 6,
        # Japanese with Latin glued to kana and Han.
        "環境変数PATHを設定し、HOMEとSHELLを確認してからbashを起動する。" * 6,
        # Accented Latin that is correct.
        f"{ENGLISH}Le café de António est près de la gare; señor Muñoz paie 2,50 €.\n",
    ]
    out = _score(docs)
    assert not any(_flagged(out, "garbage")), out


def test_undo_needs_latin_text_back() -> None:
    rule = MixedScriptWords()
    assert rule.undo("Ant贸nio").fixed == "António"
    assert rule.undo("ls和cat") is None
    assert rule.undo("upgrade之前") is None  # re-encodes to Armenian + Latin Extended-B


def test_a_bullet_the_codec_cannot_encode_counts_against_the_block() -> None:
    """A Chinese list item whose GBK bytes half-recover as UTF-8 by chance (用户主目录 -> ûĿ¼).

    Read without its bullet, 6 of the item's 10 GBK bytes are valid UTF-8: at the block
    threshold. No GBK decoder can produce `•`, so the block is not GBK's output.
    """
    from forensics.score.legacy_codecs import legacy_evidence

    page = "名称\n       passwd - 密码文件\n\n" + "\n\n".join(
        f"       •   {item}" for item in ("登录名", "数字组 ID", "用户主目录")
    )
    assert legacy_evidence(page).segments == 0
    assert not any(_flagged(_score([page + "\n\n" + ENGLISH]), "garbage"))
    # The same block read as GBK for real, bullet included, is still found.
    broken = ("       •   " + _name_as("gbk", "Ação e informação: não")) * 3
    assert _flagged(_score([ENGLISH + "\n\n" + broken + "\n\n" + ENGLISH]), "garbage") == [True]


def test_chinese_headings_recovering_by_chance_are_not_gbk_blocks() -> None:
    """Short Chinese headings whose GBK bytes give back 60% of their high bytes as UTF-8 by
    chance: what comes back is not text (用户家目录 -> `ûĿ¼`, 预设值 -> `Ԥֵװ`, 網路裝置支援 ->
    `·֧Ԯ`: a fraction, Hebrew points, the Cyrillic Supplement)."""
    from forensics.score.legacy_codecs import legacy_evidence

    prose = "本章介绍系统的安装与配置，并说明每个步骤需要注意的问题。" * 4
    for heading in ("用户家目录", "12.3.2. 预设值 Debian 安装", "5.1.4. 網路裝置支援"):
        page = f"{prose}\n\n{heading}\n\n{prose}\n"
        assert legacy_evidence(page).segments == 0, heading
        assert not any(_flagged(_score([page]), "garbage")), heading


def test_partly_recovered_mojibake_giving_back_text_is_still_a_gbk_block() -> None:
    """Vietnamese read as GBK loses some bytes to U+FFFD (17 of 21 come back) but what comes
    back is Vietnamese: the block stays mojibake."""
    from forensics.score.legacy_codecs import legacy_evidence

    broken = _name_as("gbk", "Mười hai giờ, người Việt ở đâu? Chúng tôi đến trường.")
    ev = legacy_evidence(f"{ENGLISH}\n{broken}\n\n{broken}\n\n{ENGLISH}")
    assert ev.codec == "gbk" and ev.segments == 2
    assert ev.recovered_bytes < 0.9 * ev.candidate_bytes
    assert _flagged(_score([f"{ENGLISH}\n{broken}\n\n{broken}\n\n{ENGLISH}"]), "garbage") == [True]


def test_han_glued_to_a_capital_giving_back_a_currency_sign_is_not_mojibake() -> None:
    """楼E (a floor and wing, `3楼E座`) re-encodes in GBK to `¥E`: a yen sign does not sit
    inside a word. A degree sign read as GBK (`25掳C`) does, and is still undone."""
    rule = MixedScriptWords()
    assert rule.undo("楼E") is None
    assert rule.undo("25掳C").fixed == "25°C"
    page = "办公室位于科技园3楼E座，联系人请在工作日拨打电话预约参观时间。" * 5
    assert not any(_flagged(_score([page]), "garbage"))


# ---------------------------------------------------------------- controls by position


def _insert_in_words(text: str, controls: str, seed: int) -> str:
    rnd = random.Random(seed)
    spots = [i for i in range(1, len(text)) if text[i - 1].isalpha() and text[i].isalpha()]
    picks = sorted(rnd.sample(spots, len(controls)), reverse=True)
    for pos, ch in zip(picks, controls, strict=True):
        text = text[:pos] + ch + text[pos:]
    return text


def test_a_handful_of_controls_inside_words_is_flagged() -> None:
    long = ENGLISH * 3  # ~3,600 characters: 3 controls are far below any density floor
    docs = [_insert_in_words(long, "\x01\x1b\x7f", 1), _insert_in_words(long, "\x85\x92\x9c", 2)]
    out = _score(docs)
    assert all(_flagged(out, "garbage")), out
    assert "inside words" in out["garbage_reason"][0]


def test_format_controls_at_line_edges_are_not_flagged() -> None:
    info = "\n".join(
        f"\x00\x08[index\x00\x08]\n* {p[:30]}: node {i}.\n{p}" for i, p in enumerate(PROSE[:4])
    )
    form_feeds = "\n\x0c\n".join(PROSE) + "\n"
    one_escape = ENGLISH + "\x1b[1mWarning:\x1b[0m check the log.\n" + ENGLISH
    out = _score([info, form_feeds, one_escape])
    assert not any(_flagged(out, "garbage")), out


# ---------------------------------------------------------------- cp1252 glued to a word


def test_one_cp1252_word_is_flagged_uppercase_portuguese_is_not() -> None:
    bad = f"{ENGLISH}The report was presented by {_name_as('cp1252')}.\n{ENGLISH}"
    assert "AntÃ³nio" in bad
    clean = f"{ENGLISH}Our office in SÃO PAULO moved; the CHÂTEAU team joined.\n{ENGLISH}"
    out = _score([bad, clean])
    assert _flagged(out, "garbage") == [True, False], out
    assert "inside words" in out["garbage_reason"][0]


# ---------------------------------------------------------------- doorway pages


def doorway_page(keyword: str, seed: int, frames: list[str] = PROSE) -> str:
    """`keyword` spliced into each frame at a random word position, under a title."""
    rnd = random.Random(seed)
    body = []
    for s in frames:
        words = s.split()
        words.insert(rnd.randrange(1, len(words)), keyword)
        body.append(" ".join(words))
    return keyword.title() + "\n\n" + " ".join(body)


FUNCTION_TABLE = "\n".join(
    f"{name}(value) → text  Converts the given {what} to text using the current locale."
    for name, what in [
        ("to_text", "value"), ("from_int", "integer"), ("from_float", "float number"),
        ("from_date", "date"), ("from_time", "time of day"), ("from_bool", "boolean"),
        ("from_bytes", "byte string"), ("from_list", "list of values"), ("from_map", "mapping"),
        ("from_uuid", "identifier"), ("from_path", "file path"), ("from_url", "address"),
    ]
)  # fmt: skip
SYMBOL_LIST = "\n\n".join(
    f"{sym}\n    This symbol, if defined, indicates that the {what} is available.\n"
    f"    Found in file config.h"
    for sym, what in [
        ("HAS_ALARM", "alarm routine"), ("HAS_BCOPY", "bcopy routine"),
        ("HAS_CHOWN", "chown routine"), ("HAS_CHROOT", "chroot routine"),
        ("HAS_DUP2", "dup2 routine"), ("HAS_FCHMOD", "fchmod routine"),
        ("HAS_FORK", "fork routine"), ("HAS_GETPPID", "getppid routine"),
        ("HAS_LINK", "link routine"), ("HAS_LSTAT", "lstat routine"),
        ("HAS_MKDIR", "mkdir routine"), ("HAS_PIPE", "pipe routine"),
    ]
)  # fmt: skip


def test_doorway_page_is_flagged() -> None:
    out = _score([doorway_page("running shoes", 1), doorway_page("payday loans", 2)])
    assert all(_flagged(out, "spam")), out
    assert "doorway page" in out["spam_reason"][0]


# Sentences of reference text: versions, file names, dotted paths and addresses put periods
# inside sentences.
DOTTED = [
    "Django 2.2 supports Python 3.5, 3.6, 3.7 and 3.8 (as of 2.2.8) on every platform.",
    "This lets you refer to the file polls_20101022.tar.gz from your templates as well.",
    "The syntax is similar in IPv6, such as 2001:db8:13bb:2::/64 for the whole subnet.",
    "Call django.db.models.Model.save() after changing the fields of the instance.",
    "The newer gnupg (>1.2.1-2) package can handle these corrupted subkeys correctly.",
    "The zone for 192.168.0.0/16 is named 168.192.in-addr.arpa, with the parts reversed.",
    "Run apt-get dist-upgrade at last, once /etc/apt/sources.list names the new release.",
    "Passing 0 into the memcache backend no longer uses the default timeout of 300 s.",
    "In Django 1.5 and earlier the fetched rows were converted in chunks of 100 rows.",
    "Use killall(1) or pkill(1) to do the same by the process name and other attributes.",
]


def test_doorway_page_of_reference_sentences_is_flagged() -> None:
    """A period inside a version, a file name or a dotted path does not end a sentence: the
    doorway page built from reference sentences has its phrase in every one of them."""
    rnd = random.Random(4)
    body = []
    for s in DOTTED:
        words = s.split()
        words.insert(rnd.randrange(1, len(words)), "led lights")
        body.append(" ".join(words))
    page = "Led Lights - Official Site\n\n" + "\n".join(body)
    frame = pl.DataFrame({"row": [0], "text": [page], "kw": ["led"]})
    values = DoorwayFrames().values(frame).row(0, named=True)
    assert values["sentences"] == len(DOTTED) and values["coverage"] == 1.0, values
    out = _score([page])
    assert _flagged(out, "spam") == [True] and "doorway page" in out["spam_reason"][0], out


def test_reference_tables_with_a_recurring_word_are_not_doorways() -> None:
    out = _score([FUNCTION_TABLE, SYMBOL_LIST, ENGLISH * 2])
    reasons = out["spam_reason"].to_list()
    assert not any("doorway" in r for r in reasons), reasons
    frame = pl.DataFrame(
        {"row": [0, 1], "text": [FUNCTION_TABLE, SYMBOL_LIST], "kw": ["text", "symbol"]}
    )
    values = DoorwayFrames().values(frame)
    # The recurring word sits at the same place of a repeated frame: no spread, no doorway.
    assert (values["doorway"] == 0).all(), values


def test_reference_page_naming_its_subject_everywhere_is_not_adoorway_page() -> None:
    """polars' own reference page for `selectors.signed_integer` says "columns" in every
    sentence at varied positions (the coverage and spread of a doorway page), but in changing
    company ("integer columns", "all columns", "columns except"), not as one pasted phrase."""
    import inspect

    import polars.selectors as cs

    page = inspect.getdoc(cs.signed_integer) or ""
    frame = pl.DataFrame({"row": [0, 1], "text": [page, doorway_page("running shoes", 1)]})
    values = DoorwayFrames().values(frame.with_columns(kw=pl.Series(["columns", "running"])))
    ref, spam = values.sort("row").rows(named=True)
    # Coverage and spread alone make it a doorway page.
    assert ref["coverage"] >= 0.8 and ref["sentences"] >= 8 and ref["spread"] >= 0.35, ref
    assert ref["phrase"] < 0.75 and ref["doorway"] == 0, ref
    assert spam["phrase"] == 1.0 and spam["doorway"] >= 0.8, spam


def test_machine_readable_rule_keys_beside_the_reasons() -> None:
    from forensics.score import score_texts

    long = ENGLISH * 3
    texts = pl.Series(
        [
            f"{ENGLISH}Presented by {_name_as('gbk')}.\n{ENGLISH}",
            _insert_in_words(long, "\x01\x1b\x7f", 1),
            f"{ENGLISH}Presented by {_name_as('cp1252')}.\n{ENGLISH}",
            doorway_page("running shoes", 1),
            ENGLISH,
        ]
    )
    out = score_texts(texts, keys=True)
    assert out["garbage_rule"].to_list()[:3] == ["mixed_script", "ctrl_in_word", "cp1252_in_word"]
    assert out["spam_rule"][3] == "doorway"
    assert out["garbage_rule"][4] == "" and out["spam_rule"][4] == ""
    assert score_texts(texts).columns == [
        "garbage_score", "spam_score", "garbage_reason", "spam_reason"
    ]  # fmt: skip


def test_score_table_rule_keys_for_notes() -> None:
    """A value that is not text gets the note as its reason and `not_text` as its key."""
    out = score_table(pl.DataFrame({"text": [1, 2]}), "text", keys=True)
    assert out["garbage_rule"].to_list() == ["not_text", "not_text"]
    assert out["spam_rule"].to_list() == ["", ""]
    assert score_table(pl.DataFrame({"text": [1]}), "text").columns == [
        "text", "garbage_score", "spam_score", "garbage_reason", "spam_reason"
    ]  # fmt: skip


def test_top_ngram_reason_never_reads_above_a_whole_page() -> None:
    """Gopher's top n-gram ratio counts overlapping occurrences (datatrove
    gopher_repetition_filter.py `find_top_duplicate`: the n-gram's length times its count), so
    one pair repeated end to end reaches 2x: the reason says a multiple, not "200% of" the page;
    a page below the whole keeps its share."""
    out = score_table(
        pl.DataFrame(
            {"text": ["ab ab ab ab " * 60, "buy cheap pills buy cheap pills online today " * 20]}
        )
    )
    repeated, stuffed = out["spam_reason"].to_list()
    assert "add up to 2.0x the word characters" in repeated and "%" not in repeated
    assert stuffed == "top 2-gram covers 54% of word characters"


# ---------------------------------------------------------------- keyword phrases


def test_dotted_names_do_not_cut_phrases() -> None:
    """A "." inside a token does not end a phrase. Clean: sympy's own `NaN` docstring, whose
    ``S.NaN`` and ``float('nan')`` cut at the dot read as a page of short phrases holding
    "nan". Spam: short keyword phrases between reference sentences full of versions and dotted
    paths are still most of the page's phrases."""
    import inspect

    import sympy

    doc = inspect.getdoc(sympy.core.numbers.NaN) or ""
    parts = []
    for sentence in DOTTED[:6]:
        parts += ["cheap loading", "loading online", "loading", sentence.rstrip(".")]
    out = _score([doc, ". ".join(parts) + "."])
    assert _flagged(out, "spam") == [False, True], out["spam_reason"].to_list()
    assert "of phrases, all short" in out["spam_reason"][1]
