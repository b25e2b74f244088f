"""triage's EMA has no start-up bias; triage.png is readable by everyone: a colour-blind-safe
palette, no legend over a line, each panel's title naming what its axes show."""

from __future__ import annotations

import numpy as np
import polars as pl
from matplotlib.colors import to_hex

from forensics.triage.analyze import triage
from forensics.triage.plot import OKABE_ITO, triage_figure
from forensics.triage.trend import ema_by_step
from forensics_testing import loss_curves


def _brute_ema(steps: np.ndarray, values: np.ndarray, half_life: float) -> np.ndarray:
    """The definition, term by term: weights 2^-(age / half_life), normalised."""
    out = []
    for t in range(len(values)):
        w = 2.0 ** (-(steps[t] - steps[: t + 1]) / half_life)
        out.append(float(np.sum(w * values[: t + 1]) / np.sum(w)))
    return np.array(out)


def test_ema_has_no_start_up_bias() -> None:
    """A first loss of 10 (ln vocab) then 1s: ten steps in, a 200-step EMA is near 1.9 (the
    first point has its share of eleven), not 9.7 (the recursion started at the first value
    gives it the weight of all the history before it)."""
    steps = np.arange(1, 1001)
    values = np.where(steps == 1, 10.0, 1.0)
    ema = ema_by_step(steps, values, 200)
    assert abs(ema[10] - _brute_ema(steps[:11], values[:11], 200)[-1]) < 1e-12
    assert ema[10] < 2.0 and ema[-1] < 1.01
    # Irregular steps, a long gap and a short half-life: the definition, to rounding.
    rng = np.random.default_rng(0)
    steps = np.cumsum(rng.integers(1, 40, 600)) + np.where(np.arange(600) >= 300, 50_000, 0)
    values = rng.normal(3.0, 0.5, 600)
    for hl in (4.0, 200.0):
        assert np.allclose(ema_by_step(steps, values, hl), _brute_ema(steps, values, hl))
    # Past the start it is the usual recursion (polars' ewm_mean_by).
    steps = np.arange(1, 3001)
    values = 2 + rng.random(3000)
    recursive = (
        pl.DataFrame({"s": steps, "v": values})
        .select(pl.col("v").ewm_mean_by("s", half_life="20i"))["v"]
        .to_numpy()
    )
    assert np.allclose(ema_by_step(steps, values, 20)[-2000:], recursive[-2000:], rtol=1e-9)


def _figure(df: pl.DataFrame):
    fig = triage_figure(triage(df))
    fig.canvas.draw()
    return fig


def test_png_palette_legends_and_titles() -> None:
    df = loss_curves.make("malignant_step")
    scale = np.where(df["step"].to_numpy() >= 3000, 2.0**10, 2.0**16)
    fig = _figure(df.with_columns(pl.Series("loss_scale", scale)))
    allowed = {c.lower() for c in OKABE_ITO.values()} | {"#7f7f7f"}
    renderer = fig.canvas.get_renderer()
    axes = [ax for ax in fig.axes if ax.get_lines() or ax.collections or ax.patches]
    for ax in axes:
        for line in ax.get_lines():
            assert to_hex(line.get_color()) in allowed, (ax.get_title(), line.get_label())
        for coll in ax.collections:
            for colour in coll.get_facecolor():
                assert to_hex(colour, keep_alpha=False) in allowed, ax.get_title()
        for patch in ax.patches:
            assert to_hex(patch.get_facecolor(), keep_alpha=False) in allowed
    panels = [ax for ax in fig.axes if ax.get_title()]
    titles = [ax.get_title() for ax in panels]
    assert titles == [
        "loss by iteration: its EMA, power-law fit and events",
        "grad norm by iteration (log scale): alarms shaded",
        "learning rate (left) and fp16 loss scale (right, log2) by iteration: collapses shaded",
    ]
    assert [ax.get_ylabel() for ax in panels] == ["loss", "grad norm (log)", "learning rate"]
    # Every legend sits outside every panel's plotting area: it covers no line and no label.
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert len(legends) == 3
    boxes = [ax.get_window_extent(renderer) for ax in fig.axes]
    for legend in legends:
        lb = legend.get_window_extent(renderer)
        assert not any(lb.overlaps(box) for box in boxes), legend.get_texts()[0].get_text()


def test_fp16_log_without_grad_norm_has_no_empty_panel() -> None:
    """fp16 Megatron prints a grad norm of 0.000 (not logged): no grad-norm panel claiming a
    log scale over nothing."""
    df = loss_curves.make("benign_spike").with_columns(pl.lit(0.0).alias("grad_norm"))
    fig = _figure(df)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert not any(t.startswith("grad norm") for t in titles)
