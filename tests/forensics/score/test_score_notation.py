"""Keyword rules on reference pages: a word that is part of the page's notation (a function
table's type names, a settings reference's role, a manual's paths and compounds) or a Latin
command name in a Chinese page is not stuffing; a commercial phrase repeated in short phrases
still is, in English and inside Chinese text."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from forensics.score import FLAG_THRESHOLD, score_table
from forensics.score.notation import NOTATION_CHUNK, notation_share, spaced_density

FUNCTIONS = [
    ("lower", "converts the string to all lower case"),
    ("upper", "converts the string to all upper case"),
    ("btrim", "removes the longest string of the given characters from both ends"),
    ("initcap", "converts the first letter of each word to upper case"),
    ("length", "returns the number of characters in the string"),
    ("md5", "computes the MD5 hash of the argument, as hexadecimal"),
    ("reverse", "reverses the order of the characters in the string"),
    ("ltrim", "removes the longest string of spaces from the start"),
    ("rtrim", "removes the longest string of spaces from the end"),
    ("quote_ident", "returns the string suitably quoted to be used as an identifier"),
    ("to_hex", "converts the number to its equivalent hexadecimal representation"),
    ("substr", "extracts the substring starting at the given position"),
]
# A function table as PostgreSQL's manual lays it out: `text` is 10% of the words.
FUNCTION_TABLE = "String Functions\n\n" + "\n".join(
    f"{name} ( text ) → text\n    {what.capitalize()}. Example: {name}('Tom') → 'tom'\n"
    for name, what in FUNCTIONS
)
SETTINGS = "Core settings\n\n" + "\n".join(
    f"{name}\n    Default: ``{default}``\n    See :setting:`{name}` and the :setting:`{other}` "
    f"setting for {what}.\n"
    for name, default, other, what in [
        ("DEBUG", "False", "INTERNAL_IPS", "when debug output is shown"),
        ("ALLOWED_HOSTS", "[]", "USE_X_FORWARDED_HOST", "which hosts are served"),
        ("DATABASES", "{}", "DATABASE_ROUTERS", "the connections in use"),
        ("CACHES", "{}", "CACHE_MIDDLEWARE_ALIAS", "where cached values live"),
        ("TIME_ZONE", "America/Chicago", "USE_TZ", "the zone dates are shown in"),
        ("LANGUAGE_CODE", "en-us", "LANGUAGES", "the default translation"),
        ("STATIC_ROOT", "None", "STATIC_URL", "where collected files go"),
        ("MEDIA_ROOT", "''", "MEDIA_URL", "where uploads are stored"),
        ("SECRET_KEY", "''", "SECRET_KEY_FALLBACKS", "signing cookies and tokens"),
        ("INSTALLED_APPS", "[]", "MIGRATION_MODULES", "the applications of a project"),
    ]
)
CHINESE_MANUAL = "\n".join(
    [
        "使用 apt 命令可以安装软件包，这是 Debian 系统中最常用的包管理工具之一。",
        "apt 会自动处理依赖关系，并从配置的软件源下载所需的文件。",
        "运行 apt update 可以更新软件包列表，它会读取 /etc/apt/sources.list 文件。",
        "如果需要删除软件包，可以使用 apt remove 命令，配置文件会被保留下来。",
        "彻底删除软件包及其配置文件时，应当使用 apt purge 而不是 apt remove。",
        "apt 的历史记录保存在日志文件中，管理员可以随时查看以前做过的操作。",
        "升级整个系统之前，最好先阅读发行说明，了解可能影响现有服务的变化。",
        "apt 还可以搜索软件包的名称和描述，这对于寻找合适的工具非常有用。",
        "软件源的优先级可以通过 apt 的配置来调整，从而混合使用不同版本的软件。",
        "当网络较慢时，可以配置代理服务器，或者使用本地镜像来加快下载速度。",
        "安全更新通常来自单独的软件源，应当在配置中保持启用状态，以免遗漏补丁。",
        "apt 与 dpkg 的区别在于，前者处理依赖关系，而后者只负责安装单个软件包文件。",
        "软件包的维护者负责跟踪上游版本，并把修复后的版本上传到发行版的仓库中。",
        "每个软件包都有一个控制文件，其中列出了名称、版本、依赖关系和简短的说明。",
        "系统管理员应当定期检查磁盘空间，因为下载的软件包文件会保存在缓存目录中。",
        "测试版和不稳定版提供更新的软件，但也可能包含尚未发现的错误和兼容性问题。",
        "常用的子命令有 apt install、apt remove、apt purge、apt search 和 apt show。",
        "例如 apt show apt 显示 apt 本身的版本，apt list 列出软件包，apt policy 显示优先级。",
    ]
)
STUFFED = ", ".join(
    ["cheap flights", "cheap flights online", "best cheap flights to Paris", "flights deals",
     "book cheap flights now", "last minute flights", "cheap flights from London",
     "discount flights"] * 6
)  # fmt: skip
STUFFED_IN_CHINESE = "，".join(
    ["iphone 15 便宜", "买 iphone 15", "iphone 15 最好价格", "iphone 15 优惠券", "iphone 15 在线",
     "正品 iphone 15", "iphone 15 包邮", "iphone 15 分期"] * 6
)  # fmt: skip


def _spam(texts: list[str]) -> list[tuple[float, str]]:
    out = score_table(pl.DataFrame({"id": range(len(texts)), "text": texts}), "text")
    return list(zip(out["spam_score"].to_list(), out["spam_reason"].to_list(), strict=True))


def test_type_names_in_a_function_table_are_notation() -> None:
    assert notation_share(FUNCTION_TABLE, "text") >= 0.5
    assert notation_share(STUFFED, "flights") == 0.0


def test_latin_command_in_chinese_text_counted_by_characters() -> None:
    tokens = len(re.findall(r"\w+", CHINESE_MANUAL))
    assert CHINESE_MANUAL.count("apt") / tokens > 0.2  # what the token count says
    assert spaced_density(CHINESE_MANUAL, "apt") < 0.12  # counted as Chinese is read
    assert spaced_density(STUFFED_IN_CHINESE, "iphone") > 0.2


def test_reference_pages_are_clean() -> None:
    for (score, reason), name in zip(
        _spam([FUNCTION_TABLE, SETTINGS, CHINESE_MANUAL]),
        ["function table", "settings reference", "Chinese manual"],
        strict=True,
    ):
        assert score < FLAG_THRESHOLD, (name, reason)


def test_stuffed_pages_are_still_spam() -> None:
    for score, reason in _spam([STUFFED, STUFFED_IN_CHINESE]):
        assert score >= FLAG_THRESHOLD, reason
        assert reason


# Django 5.1.4's docs/ref/class-based-views/flattened-index.txt, its `CreateView` section (BSD
# licence, Django Software Foundation): every attribute is a role around a qualified name, so
# "django views generic" is the page's most repeated 3-gram.
CREATEVIEW = (Path(__file__).parent / "django_createview.txt").read_text("utf-8")
NOTATED = [
    "Call django.db.models.Model.save() after changing the fields of the instance.",
    "See :setting:`MEDIA_ROOT` and https://docs.example.com/ref/models.html for details.",
    "Buy the best running shoes at shoes.example.com today and save on every order.",
]


def test_qualified_names_in_an_attribute_list_are_not_repetition() -> None:
    """The n-gram rules read the page without its notation: its prose repeats nothing."""
    ((score, reason),) = _spam([CREATEVIEW])
    assert score < FLAG_THRESHOLD, reason
    assert len(re.findall(NOTATION_CHUNK, CREATEVIEW)) >= 25


def test_repeated_lines_with_notation_in_them_are_still_spam() -> None:
    """A page that repeats its lines repeats their words too: its prose still has repeated
    6-grams beside the duplicated lines."""
    ((score, reason),) = _spam(["\n".join(NOTATED * 12)])
    assert score >= FLAG_THRESHOLD and "duplicated lines" in reason, reason


# debian-reference 2.100 (zh-tw), section 9.8.10, as the reference set renders it: a deleted file
# recovered through /proc, shown as a shell session on a file named `bar`.
TRANSCRIPT = (Path(__file__).parent / "debref_zh_tw_lsof.txt").read_text("utf-8")


def test_command_lines_of_a_shell_session_are_notation() -> None:
    """`bar` is a third of the page's short clauses, as a command's argument on prompt lines."""
    assert notation_share(TRANSCRIPT, "bar") >= 0.5
    assert notation_share(STUFFED, "flights") == 0.0
    ((score, reason),) = _spam([TRANSCRIPT])
    assert score < FLAG_THRESHOLD, reason


# debian-reference 2.100 (zh-tw), sections 10.5.1-10.5.2 (configuring Git, the basic Git
# commands), as the reference set renders it: "git" is 9% of the words counted as Chinese is
# read, a fifth of them on prompt lines (`$ git config --global ...`).
GIT = (Path(__file__).parent / "debref_zh_tw_git.txt").read_text("utf-8")


def test_a_keyword_counts_where_it_is_prose() -> None:
    """The keyword rules count the command where the page's prose names it, not on the command
    lines it shows: 9% of the words with them, under 8% without."""
    share = notation_share(GIT, "git")
    assert 0.1 < share < 0.5  # some notation, not mostly: the all-notation waiver does not apply
    assert spaced_density(GIT, "git") >= 0.08  # what the density rule measured on the whole page
    assert spaced_density(GIT, "git") * (1 - share) < 0.08
    ((score, reason),) = _spam([GIT])
    assert score < FLAG_THRESHOLD, reason


def test_a_stuffed_page_with_some_notation_is_still_spam() -> None:
    """Stuffed phrases beside a few notated occurrences (a link and a role per ten phrases)."""
    notated = ["`flights`", "https://example.com/flights"]
    words = "cheap best last minute discount direct budget return family weekend student".split()
    page = ", ".join([f"{w} flights" for w in words] + notated + [f"flights {w}" for w in words])
    assert 0 < notation_share(page, "flights") < 0.5
    ((score, reason),) = _spam([page])
    assert score >= FLAG_THRESHOLD and "keyword stuffing" in reason, reason
