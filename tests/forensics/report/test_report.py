"""The spike report on a generated window: contents, escaping of hostile text, and rendering."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import zlib

import numpy as np
import polars as pl
import pytest
from rich.console import Console

from forensics.cluster import assign_verdicts, cluster_embeddings, cluster_sources, describe_sample
from forensics.errors import ForensicsError
from forensics.report import ReportSkip, build_report, print_summary, write_report
from forensics_testing.windows import generate_run

SCRIPT = "<script>alert(1)</script>"
NOTES = [
    "the window crosses the start of a data stage at iteration 81001",
    "baseline 77935-78234: ending 2700 iterations before the window",
    f"training log not overlaid: /runs/{SCRIPT}\x1b[2J.log: unreadable",
]


class HashEmbedder:
    """A cheap stand-in for MiniLM: bag of hashed words (the report tests test the report)."""

    model_id = "hash-bow-test"

    def __call__(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, zlib.crc32(word.encode()) % 64] += 1.0  # hash() varies by process
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def make_report(dirty_share: float = 0.1, skip: bool = True, seed: int = 21):
    run = generate_run(1500, 1500, dirty_share=dirty_share, hostile=True, seed=seed)
    clusters = cluster_sources(run.window, run.baseline)
    emb, assignments = cluster_embeddings(
        run.window, run.baseline, cap=400, embedder=HashEmbedder(), progress=False
    )
    ranked = assign_verdicts(pl.concat([clusters, emb], how="diagonal"))
    steps = np.arange(80800, 81300)
    loss = pl.DataFrame({"step": steps, "loss": 2.0 + 0.4 * (steps > 81200)})
    report = build_report(
        81234, (80935, 81234), (77935, 78234), 81150, ranked, run.window, run.baseline,
        replay=run.replay, assignments=assignments,
        embedding_note=describe_sample(assignments, 400), loss=loss,
        rollback_note="the last checkpoint before the culprit's first iteration",
        notes=NOTES,
    )  # fmt: skip
    if skip:
        report.skip = ReportSkip.from_dict({
            "iterations": [[81001, 81234]],
            "trainer": "megatron-lm",
            "flags": {
                "megatron-lm": {
                    "flag": "--iterations-to-skip " + " ".join(map(str, range(81001, 81235))),
                    "semantics": "value k skips the batch logged as iteration k",
                    "consequence": "the lr schedule lags by 234 steps",
                },
                "megatron-deepspeed": {
                    "flag": None,
                    "refusal": "ranges too close for its parser",
                    "semantics": "drains micro-batches",
                },
            },
            "collateral": {"clean_samples_skipped": 1150, "culprit_samples_unskipped": 0},
            "ahead": "it is 9.6% of every remaining batch until iteration 240000",
            "documents": 151,
            "seen_in_window": 125,
        })  # fmt: skip
    return run, report


def with_action(report, **action):
    """The report with skip.json's `action` set (a typed view of it, as the pipeline builds)."""
    from dataclasses import replace

    from forensics.report.skip_view import ActionView

    report.skip = replace(report.skip, action=ActionView.from_dict(action))
    return report


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    run, report = make_report()
    out = tmp_path_factory.mktemp("report")
    sections = write_report(report, out)
    return run, report, out, sections


def test_report_json_has_the_contract_fields(written):
    run, report, out, _ = written
    data = json.loads((out / "report.json").read_text())
    assert data["step"] == 81234 and data["window"] == [80935, 81234]
    assert data["baseline"] == [77935, 78234] and data["rollback_iteration"] == 81150
    clusters = data["clusters"]
    suspicion = [c["suspicion"] for c in clusters]
    assert suspicion == sorted(suspicion, reverse=True)
    need = {"id", "kind", "facet", "key", "docs", "window_share", "baseline_share", "enrichment",
            "p_value", "garbage_rate", "spam_rate", "suspicion", "verdict", "examples"}  # fmt: skip
    assert all(need <= set(c) for c in clusters)
    assert not any("members" in c for c in clusters)
    top = next(c for c in clusters if c["id"] == data["culprit"])
    assert (top["kind"], top["facet"], top["key"]) == ("source", "crawl_batch", run.dirty_batch)
    assert top["verdict"] == "culprit" and top["new_in_window"] is True
    assert 1 <= len(top["examples"]) <= 3
    assert {"doc_id", "dataset", "excerpt", "reasons"} <= set(top["examples"][0])
    assert all(c["verdict"] == "clean" for c in clusters
               if c["facet"] == "crawl_batch" and c["key"] in run.clean_batches)  # fmt: skip
    assert data["culprit_first_iteration"] == 81001
    assert data["rules"]["verdict_rule"].startswith("over-represented")
    assert "\x1b" not in (out / "report.json").read_text()
    # The share plot's data: before the switch no culprit samples, after it some.
    share = dict(data["culprit_share"])
    assert max(v for k, v in share.items() if k < 81001) == 0
    assert max(v for k, v in share.items() if k >= 81001) > 0


def test_hostile_document_is_escaped_in_html_markdown_and_terminal(written):
    _, report, out, _ = written
    page = (out / "report.html").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script" not in page.lower()
    assert "\x1b" not in page and "pwned\x07" not in page
    md = (out / "report.md").read_text()
    assert SCRIPT not in md and "\x1b" not in md
    from dataclasses import replace

    hostile = replace(report, rollback_note=f"{SCRIPT}\x1b[2J\x1b]0;pwned\x07 [bold]x[/bold]")
    buf = io.StringIO()
    print_summary(hostile, Console(file=buf, width=160, force_terminal=True, color_system=None))
    text = buf.getvalue()
    assert SCRIPT in text and "[bold]x[/bold]" in text  # shown, as text
    assert "\x1b[2J" not in text and "\x1b]0;" not in text and "\x07" not in text
    assert "CULPRIT" in text and "crawl_batch=crawl-2026-10-17" in text


def test_long_paste_line_points_at_the_flags_file_from_where_spike_ran():
    """The box's $(cat ...) must work from the shell the engineer ran spike in, not only from
    inside the spike directory: skip.json's action.flags_dir leads the path."""
    from forensics.report.first_screen import first_screen

    _, report = make_report()
    with_action(report, kind="skip", why="confined", flags_dir="runs/spike-81234")
    screen = first_screen(report)
    (restart,) = screen.commands
    assert restart.text == "$(cat runs/spike-81234/restart-megatron-lm.flags)"
    assert "restart from checkpoint iteration 81150" in restart.note
    assert "append to the launch line" in restart.note
    assert screen.action == "skip iterations 81001-81234 (234 iterations) on the restart"
    assert screen.headline.endswith(
        "restart from checkpoint iteration 81150 skipping 234 iterations"
    )
    assert screen.stopgap == []  # skipping is the fix: no stopgap


def test_rebuild_leads_with_its_commands_in_order_and_the_stopgap_below():
    """rebuild: the rebuild command, then the restart line from the rebuild's folder; the skip
    flags are the labelled stopgap under the box; the headline names culprit, grade and action."""
    from forensics.report.first_screen import first_screen

    _, report = make_report()
    with_action(report, kind="rebuild", command="forensics rebuild runs/spike-81234",
                why="it is 9.6% of the rest of the run", stopgap="skip the listed iterations",
                flags_dir="runs/spike-81234", rebuild_out="runs/rebuild-81234",
                restart_file="runs/rebuild-81234/restart-rebuilt.flags",
                restart_holds="the checkpoint pin and the new --data-path",
                restart_is_flags=True)  # fmt: skip
    screen = first_screen(report)
    assert [c.text for c in screen.commands] == [
        "forensics rebuild runs/spike-81234",
        "$(cat runs/rebuild-81234/restart-rebuilt.flags)",
    ]
    assert screen.headline == (
        "Spike at iteration 81234: culprit crawl_batch=crawl-2026-10-17 (dataset web_v2), strong "
        "evidence; remove and rebuild, then restart from checkpoint iteration 81150"
    )
    assert (
        screen.stopgap[0][0] == "STOPGAP" and "cannot wait for the rebuild" in screen.stopgap[0][1]
    )
    assert screen.stopgap_command.text == "$(cat runs/spike-81234/restart-megatron-lm.flags)"
    labels = [label for label, _ in screen.lines()]
    assert labels.index("ACTION") < labels.index("STOPGAP") < labels.index("CULPRIT")
    assert "SKIP" not in labels  # the stopgap names the iterations


def test_html_is_self_contained_with_its_plots(written):
    _, _, out, _ = written
    page = (out / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') == 4
    assert "http://" not in page and "https://" not in page
    files = {p.name for p in out.iterdir()}
    assert {"report_timeline.png", "report_culprit_share.png", "report_embedding.png",
            "report_scores.png"} <= files  # fmt: skip
    md = (out / "report.md").read_text()
    assert "(report_embedding.png)" in md and "(report_timeline.png)" in md
    # The first screen: headline, the commands, then the reasons in the sketch's order.
    labels = ["Spike at iteration 81234", "ACTION", "CULPRIT", "why", "ROLL BACK", "SKIP",
              "BLOCK LIST", "AHEAD", "CLUSTERS"]  # fmt: skip
    positions = [md.index(label) for label in labels]
    assert positions == sorted(positions)
    # A long line is never cut: the box points at the flags-only file instead.
    box = md[md.index("~~~text") : md.index("~~~\n", md.index("~~~text") + 1)]
    assert "\n$(cat restart-megatron-lm.flags)" in box and "append to the launch line" in box
    # A trainer whose syntax cannot say the skip shows the refusal, never a string to paste.
    assert "No exact flag: ranges too close for its parser" in page


def test_pipeline_notes_are_on_the_first_screen_of_every_format(written):
    """The notes (stage crossing, how the baseline was chosen) sit under the summary, escaped."""
    _, report, out, _ = written
    data = json.loads((out / "report.json").read_text())
    assert data["notes"][:2] == NOTES[:2]
    assert SCRIPT in data["notes"][2]  # JSON keeps the text; it is not markup there
    md = (out / "report.md").read_text()
    reasons_end = md.index("- **CLUSTERS**")
    crossing = md.index("data stage at iteration 81001")
    assert reasons_end < crossing < md.index("## Clusters")
    assert "baseline 77935-78234: ending 2700 iterations" in md
    assert SCRIPT not in md and "\x1b" not in md
    page = (out / "report.html").read_text()
    summary_end = page.index('</pre></div><ul class="notes">')
    assert summary_end < page.index("data stage at iteration 81001") < page.index("<h2>Plots")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "\x1b" not in page
    buf = io.StringIO()
    print_summary(report, Console(file=buf, width=160, force_terminal=True, color_system=None))
    text = buf.getvalue()
    assert "\x1b[2J" not in text
    if "note" in text:  # the notes come after the reasons, when the screen has room for them
        assert text.index("AHEAD") < text.index("data stage at iteration") < text.index("CLUSTERS")


def test_embedding_plot_shows_the_culprits_documents_as_such(written):
    """Points are the culprit's when their document is in a culprit cluster (here the dirty
    crawl batch, a source), even where their embedding cluster is clean or explained by it; the
    legend names the culprit plainly."""
    from forensics.report.plots import embedding_figure

    run, report, _, _ = written
    top = report.culprit
    xy = report.embedding_xy.join(
        run.window.select("dataset", "doc_id", "crawl_batch"), on=["dataset", "doc_id"], how="left"
    )
    window = xy.filter(pl.col("side") == "window")
    dirty = window["crawl_batch"] == run.dirty_batch
    assert dirty.sum() > 0 and (window["culprit"] == top["id"]).fill_null(False).equals(dirty)
    assert (
        xy.filter(pl.col("side") == "baseline")["culprit"].null_count()
        == xy.filter(pl.col("side") == "baseline").height
    )
    # The embedding clusters those documents fall in are not culprits themselves: the verdict
    # colouring would have painted them clean.
    emb = report.clusters.filter(pl.col("kind") == "embedding")
    holding = set(window.filter(dirty)["cluster"].to_list())
    assert not emb.filter(pl.col("id").is_in(holding) & (pl.col("verdict") == "culprit")).height
    fig = embedding_figure(report)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    docs = report.culprit["docs"]
    assert (
        f"culprit: crawl_batch={run.dirty_batch} ({int(dirty.sum())} of its {docs:,} window "
        "documents embedded)"
    ) in labels
    assert any(label.startswith("flagged: garbage or spam") for label in labels)
    assert any(label.startswith("window, not in a culprit") for label in labels)


def test_share_plot_shows_the_loss_a_little_past_the_spike(written):
    """The loss overlay runs window/10 past the spike when the log has those steps (so the jump
    is not hidden under the spike line), and stops at the log's end or the spike otherwise."""
    from dataclasses import replace

    from forensics.report.plots import loss_span, plot_culprit_share

    _, report, _, _ = written
    assert report.window == (80935, 81234) and int(report.loss["step"].max()) == 81299
    assert loss_span(report, 80935) == (80935, 81234 + 30)
    short = replace(report, loss=report.loss.filter(pl.col("step") <= 81240))
    assert loss_span(short, 80935) == (80935, 81240)
    ends = replace(report, loss=report.loss.filter(pl.col("step") <= 81234))
    assert loss_span(ends, 80935) == (80935, 81234)
    assert loss_span(replace(report, loss=None), 80935) == (80935, 81234)
    assert plot_culprit_share(short).startswith(b"\x89PNG")


def test_clean_window_says_so_plainly(tmp_path):
    _, report = make_report(dirty_share=0.0, skip=False, seed=22)
    write_report(report, tmp_path)
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["culprit"] is None
    assert all(c["verdict"] != "culprit" for c in data["clusters"])
    md = (tmp_path / "report.md").read_text()
    assert "NO CULPRIT" in md and "the data looks like the baseline" in md
    assert "NEXT" in md and "forensics triage" in md  # triage's causes: the next step
    assert "SKIP" not in md and "BLOCK LIST" not in md


def test_write_report_refuses_to_clobber_without_overwrite(tmp_path):
    _, report = make_report(seed=23)
    write_report(report, tmp_path)
    before = (tmp_path / "report.json").read_text()
    with pytest.raises(ForensicsError, match="already exists"):
        write_report(report, tmp_path, overwrite=False)
    assert (tmp_path / "report.json").read_text() == before
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_html_renders_in_headless_chromium(written, tmp_path):
    """Open report.html in headless Chromium, screenshot it, and check the plots drew pixels."""
    from matplotlib.image import imread

    _, _, out, _ = written
    shot = tmp_path / "report.png"
    cmd = [
        "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
        "--window-size=1280,2400", (out / "report.html").resolve().as_uri(),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    image = imread(shot)
    assert image.shape[:2] == (2400, 1280)
    rgb = image[..., :3]
    ink = (rgb.sum(axis=2) < 2.9).mean()
    # the culprit's colour: the first screen's red rule, the plots' vermillion (Okabe-Ito)
    culprit = (rgb[..., 0] > 0.75) & (rgb[..., 1] < 0.45) & (rgb[..., 2] < 0.2)
    assert ink > 0.05  # text, tables and plots, not a blank page
    assert culprit.sum() > 2000  # first screen's rule, share plots, scatter
    # The plots come after the first screen: a tall band of vermillion plot pixels (the red
    # rule is left of x=40).
    assert (culprit[:, 60:].sum(axis=1) > 0).sum() > 150
    shutil.copy(shot, out / "screenshot.png")


def test_summary_is_not_wrapped_at_80_columns_when_piped(written, monkeypatch):
    """Off a terminal (a file, a CI log) without $COLUMNS the summary gets 120 columns, not
    rich's 80; a set $COLUMNS still wins."""
    import sys

    from dataloaders.console import PIPE_WIDTH, make_console

    _, report, _, _ = written
    buf = io.StringIO()
    monkeypatch.setattr(sys, "stdout", buf)
    monkeypatch.delenv("COLUMNS", raising=False)
    assert make_console().width == PIPE_WIDTH == 120
    print_summary(report)
    lines = buf.getvalue().splitlines()
    assert max(len(line) for line in lines) > 80
    assert all(len(line) <= PIPE_WIDTH for line in lines)
    assert lines[0].startswith("Spike at iteration 81234") and len(lines[0]) > 80
    monkeypatch.setenv("COLUMNS", "100")
    assert make_console().width == 100


@pytest.mark.parametrize("width", [80, 120])
def test_terminal_fits_a_screen_and_ends_with_the_report_link(written, width, tmp_path):
    """At most 25 rows at the terminal's width (a soft-wrapped command counts its rows), the
    headline first, the commands whole on their own lines, only clusters that are not clean,
    and report.html's path as a file:// link last."""
    from forensics.report.terminal import TERMINAL_LINES

    _, report, out, sections = written
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    print_summary(report, console, sections, out / "report.html")
    lines = buf.getvalue().splitlines()
    rows = sum(max(1, -(-len(line) // width)) for line in lines)
    assert rows <= TERMINAL_LINES, "\n".join(lines)
    assert lines[0].startswith("Spike at iteration 81234: culprit crawl_batch=crawl-2026-10-17")
    assert lines[-1] == f"report: {(out / 'report.html').resolve().as_uri()}"
    assert "" not in lines  # no blank line anywhere
    assert "$(cat restart-megatron-lm.flags)" in lines  # whole, on its own line
    shown = [line.split()[1] for line in lines if line.startswith("  ") and "docs," in line]
    assert shown and set(shown) <= {"culprit", "suspect"}
    assert any(line.startswith("CLUSTERS") for line in lines)


def test_culprit_share_per_iteration_counts_samples_not_rows() -> None:
    """A sample counts once however many culprit segments it holds; an iteration without a
    culprit document has share 0."""
    from forensics.report.contents import culprit_share_per_iteration

    replay = pl.DataFrame({
        "iteration": [1, 1, 1, 1, 2, 2],
        "sample_index": [10, 10, 11, 12, 20, 21],
        "dataset": ["a", "a", "a", "b", "a", "b"],
        "doc_id": [1, 2, 3, 1, 3, 4],
    })  # fmt: skip
    blocked = pl.DataFrame({"dataset": ["a", "a", "b"], "doc_id": [1, 2, 1]})
    got = culprit_share_per_iteration(replay, blocked)
    assert got.rows() == [(1, 2 / 3, 3), (2, 0.0, 2)]
