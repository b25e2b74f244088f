"""The watcher's spike analyses and plans: start `forensics spike` when a spike is raised,
report it when it ends, post the plan's status (forensics.watch.plans). A mixin of
`forensics.watch.loop.Watcher`, which holds the state these methods use (the options, the
event book, the running jobs, the plans)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forensics.rollback import FAR
from forensics.watch.plans import PlanState, event_verdict, next_status, plan_message
from forensics.watch.spikejob import (
    SpikeJob,
    not_started_message,
    pid_runs_spike,
    run_source,
    source_saved,
    spike_folder,
    spike_result,
    start_spike,
    started_message,
)
from forensics.window import spike_window

MAX_ANALYSES = 2  # background spike runs at once; in a burst of spikes the rest get triage's plan


class PlanRunner:
    """Spike analyses and plans for a Watcher (see the module docstring)."""

    opts: Any
    book: Any
    out: Any
    detector: Any
    polls: int
    jobs: dict[int, SpikeJob]
    plans: dict[int, PlanState]

    def _emit(self, msg: dict[str, Any]) -> dict[str, Any]:  # pragma: no cover - Watcher's
        raise NotImplementedError

    def _key_of(self, msg: dict[str, Any]) -> int:
        """The step a raised/verdict message's event is known by (its first raised step)."""
        known = self.book.find(msg["kind"], msg.get("curve"), msg["step"], msg.get("end_step"), 0)
        return known.step if known is not None else int(msg["step"])

    def _advance_plan(self, key: int, ev: dict[str, Any]) -> list[dict[str, Any]]:
        """A spike raised or judged: start the analysis at once (not only once malignant), then
        post the plan's status if it changed (forensics.watch.plans)."""
        state = self.plans.setdefault(key, PlanState())
        state.event, state.verdict = ev, event_verdict(ev)
        out = self._maybe_start_spike(ev, key) if state.verdict != "benign" else []
        return out + self._post_plan(key)

    def _post_plan(self, key: int) -> list[dict[str, Any]]:
        state = self.plans.get(key)
        if state is None or not state.event:
            return []
        status = next_status(state, analysing=key in self.jobs)
        if status is None:
            return []
        state.posted = status
        when = {"at_step": self.detector.last_step, "poll": self.polls}
        return [self._emit(plan_message(key, state, status) | when)]

    def _maybe_start_spike(self, ev: dict[str, Any], key: int) -> list[dict[str, Any]]:
        source = run_source(self.opts.config, self.opts.from_checkpoint)
        if self.opts.on_malignant != "spike" or source is None:
            return []
        if ev.get("replay_suggested") is False:  # another cause is supported: check it first
            return []
        if key in self.jobs or self.book.has("forensics_started", step=key):
            return []
        if len(self.jobs) >= MAX_ANALYSES:  # a burst of spikes: their plans are triage's own
            return []
        if not source_saved(source):  # asked again when the spike is judged; said once
            if self.book.has("forensics_not_started", step=key):
                return []
            return [self._emit(not_started_message(key, source))]

        window, _why = spike_window(key, int(ev.get("rollback_iteration", key - FAR)))
        window = self.opts.run.window or window  # --spike-args '--window N' wins
        # a spike on one domain's curve alone: that domain's folder, as triage names it
        domain = ev.get("domain") if ev.get("scope") == "one domain" else None
        folder = spike_folder(key, domain)
        self.jobs[key] = start_spike(
            source, key, window, self.out, extra=self.opts.spike_args, folder=folder
        )
        self.plans.setdefault(key, PlanState()).started = True
        return [self._emit(started_message(self.jobs[key], window))]

    def _report_job(self, step: int, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The finished analysis's message, then the plan it completes."""
        msg = self._emit({"message": "forensics", "kind": "spike_forensics", "step": step, **body})
        self.plans.setdefault(step, PlanState()).result = msg
        return [msg, *self._post_plan(step)]

    def _resume_jobs(self) -> None:
        """Jobs a previous watcher started but did not report: report or restart them."""
        for msg in self.book.messages:
            if msg.get("message") != "forensics_started":
                continue
            step = int(msg["step"])
            if self.book.has("forensics", step=step):
                continue
            out = Path(msg["out"]) if msg.get("out") else self.out / f"spike-{step}"
            log = out.with_name(f"{out.name}.log")
            if (out / "report.json").exists() and (out / "skip.json").exists():
                self._report_job(step, spike_result(step, out, log, 0))
            elif msg.get("pid") and pid_runs_spike(int(msg["pid"])):
                self.jobs[step] = SpikeJob(step, out, log, None, int(msg["pid"]))  # still running
            elif (source := run_source(self.opts.config, self.opts.from_checkpoint)) is not None:
                self.jobs[step] = start_spike(
                    source,
                    step,
                    int(msg.get("window", 100)),
                    self.out,
                    extra=self.opts.spike_args,
                    force=True,
                    folder=out.name,
                )

    def _check_jobs(self) -> list[dict[str, Any]]:
        out = []
        for step, job in list(self.jobs.items()):
            finished, rc = job.returncode()
            if not finished:
                continue
            del self.jobs[step]
            out += self._report_job(step, spike_result(step, job.out, job.log, rc))
        return out
