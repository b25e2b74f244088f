"""The terminal side of `forensics watch`: a live rich view when stdout is a terminal, plain
lines otherwise. Names and summaries are `rich.text.Text`, never markup: a curve called
`loss/[bold]` or a log path with `:emoji:` is shown as written."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from forensics.safe_text import excerpt

_STYLE = {
    "malignant": "bold red",
    "divergence": "bold red",
    "undecided": "yellow",
    "benign": "green",
    "grad_norm_alarm": "yellow",
    "loss_scale_collapse": "yellow",
}


def message_text(msg: dict[str, Any]) -> Text:
    """One message as a line of plain text with a style on its head (no markup parsing)."""
    key = msg.get("verdict") or msg.get("kind", "")
    line = Text(f"#{msg.get('seq', '?')} ", style="dim")
    # long enough never to cut a path or a command out of a message (only control characters go)
    line.append(excerpt(str(msg.get("summary", "")), 4000), style=_STYLE.get(key, ""))
    return line


class Terminal:
    """Live view (a table of the latest values and the open events) or one line per message."""

    def __init__(self, console: Console, log: str, live: bool) -> None:
        self.console = console
        self.log = log
        self.recent: list[dict[str, Any]] = []
        self.live: Live | None = None
        if live and console.is_terminal:
            self.live = Live(console=console, auto_refresh=False, transient=False)
            self.live.start()

    def show(self, new: list[dict[str, Any]], view: dict[str, Any]) -> None:
        self.recent = (self.recent + new)[-12:]
        if self.live is None:
            for msg in new:
                self.console.print(message_text(msg), soft_wrap=True)
            return
        self.live.update(self._render(view), refresh=True)

    def warn(self, line: str) -> None:
        """One line that is not a message of the log (a webhook that did not take an alert),
        printed above the live view or between the message lines."""
        self.console.print(Text(excerpt(line, 4000), style="bold yellow"), soft_wrap=True)

    def _render(self, view: dict[str, Any]) -> Group:
        table = Table(title=Text(f"forensics watch {excerpt(self.log, 120)}"), show_header=False)
        table.add_column("what")
        table.add_column("value")
        for label, key, fmt in (
            ("step", "step", "{:.0f}"),
            ("loss", "loss", "{:.4f}"),
            ("loss EMA", "loss_ema", "{:.4f}"),
            ("grad norm", "grad_norm", "{:.4g}"),
            ("grad-norm EMA / baseline", "grad_ratio", "{:.2f}x"),
            ("open spikes", "open_spikes", "{:.0f}"),
            ("log", "status", "{}"),
        ):
            v = view.get(key)
            table.add_row(Text(label), Text("-" if v is None else fmt.format(v)))
        events = [message_text(m) for m in self.recent]
        return Group(table, *events)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
