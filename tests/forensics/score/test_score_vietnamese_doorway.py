"""The doorway rule on Vietnamese, which writes a space between the syllables of a word.

The clean look-alike is a real reference page: debian-handbook 11.20220922 (Vietnamese),
appendix B.1.4 "Quản lý tiến trình" (GPL-2+ / CC-BY-SA 3.0, Raphaël Hertzog and Roland Mas), as
`scripts/eval_corpus_ref.py` renders it. It is about processes, "tiến trình", a word of two
syllables: "trình" is in 88% of its sentences at varied positions with "tiến" always beside it,
which is a pasted phrase's signature in a language that spaces words, not syllables. The spam is
a doorway page of Vietnamese frames with a product phrase spliced in, in Vietnamese and in English.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from test_score_signals import doorway_page

from forensics.score import FLAG_THRESHOLD, score_table
from forensics.score.doorway import DoorwayFrames

PROCESSES = (Path(__file__).parent / "handbook_vi_processes.txt").read_text("utf-8")
# Sentences of unrelated topics (a doorway page's frames come from anywhere).
FRAMES = [
    "Hệ thống tệp được gắn vào cây thư mục khi máy khởi động.",
    "Người quản trị nên sao lưu dữ liệu quan trọng mỗi tuần một lần.",
    "Gói phần mềm này cung cấp các công cụ để quản lý mạng.",
    "Tệp cấu hình nằm trong thư mục etc và chỉ người quản trị mới sửa được.",
    "Bản phát hành mới sửa nhiều lỗi bảo mật đã được báo cáo.",
    "Nhật ký hệ thống ghi lại mọi sự kiện quan trọng của máy chủ.",
    "Bạn có thể cài đặt thêm phông chữ từ kho lưu trữ chính thức.",
    "Máy in được chia sẻ qua mạng nội bộ cho tất cả nhân viên.",
    "Mật khẩu mạnh cần có chữ hoa, chữ thường, số và ký tự đặc biệt.",
    "Trình duyệt web lưu dữ liệu tạm để tải trang nhanh hơn.",
    "Dịch vụ thư điện tử cần một tên miền và bản ghi hợp lệ.",
    "Người dùng mới được thêm vào nhóm sudo để chạy lệnh quản trị.",
]


def _values(text: str, kw: str) -> dict:
    frame = pl.DataFrame({"row": [0], "text": [text], "kw": [kw]})
    return DoorwayFrames().values(frame).row(0, named=True)


def test_a_two_syllable_word_is_not_a_pasted_phrase() -> None:
    values = _values(PROCESSES, "trình")
    # A doorway page's coverage and spread, as any page about one thing has ...
    assert values["coverage"] >= 0.8 and values["spread"] >= 0.35, values
    # ... and "tiến" always beside "trình": as a phrase of words, this would be one.
    assert PROCESSES.lower().count("tiến trình") >= 0.75 * PROCESSES.lower().count("trình")
    assert values["phrase"] < 0.75 and values["doorway"] == 0, values
    out = score_table(pl.DataFrame({"text": [PROCESSES]}), "text")
    assert out["spam_score"][0] < FLAG_THRESHOLD, out["spam_reason"][0]


def test_vietnamese_doorway_pages_are_still_found() -> None:
    """A Vietnamese product phrase ("giày chạy bộ", running shoes: three syllables) and an
    English one ("running shoes") spliced into Vietnamese frames."""
    pages = [doorway_page("giày chạy bộ", 1, FRAMES), doorway_page("running shoes", 2, FRAMES)]
    for page, kw in zip(pages, ["chạy", "running"], strict=True):
        values = _values(page, kw)
        assert values["phrase"] == 1.0 and values["doorway"] >= 0.8, values
    out = score_table(pl.DataFrame({"text": pages}), "text")
    assert (out["spam_score"] >= FLAG_THRESHOLD).all(), out["spam_reason"].to_list()
    assert all("doorway page" in r for r in out["spam_reason"]), out["spam_reason"].to_list()
