"""The trainers' own skip code, run on CPU: the oracle for `dataloaders/trainers/`.

Each trainer module transcribes its loop; here the loop is the trainer's source itself. The lines
that decide what a skip flag does (Megatron-LM's `iterations_to_skip` check and its
`dummy_train_step`, BigScience Megatron-DeepSpeed's range parser and drain loop, argonne-lcf's
pair parser and skipped step) are vendored verbatim in `upstream/trainer_skip_snippets.py`, each
with its repository, commit, file, line range and the sha256 of its text; `SPANS` below names
them. `fetched_text` reads the same lines from a `fetch`ed copy of the repository, so a test
can hold the vendored text to the source (the copy is not there offline: CI checks the hashes).

The snippets are pasted, unchanged, into a small harness `train` function per trainer (the
indentation of the source kept, so the glue lines sit at the same depth) and exec'd. What the
harness supplies is what runs on a GPU cluster, stubbed:
- the data iterator: one `next()` is one micro-batch of `micro_batch_size x data_parallel_size`
  consecutive global samples from the restored consumed-samples count on (Megatron's
  MegatronPretrainingSampler, each rank taking its slice of that micro-batch);
- the model step: `train_step` draws `get_num_microbatches()` micro-batches (the
  forward-backward schedule's one `next()` per micro-batch) and records them as trained;
- the batch-size ramp and micro-batch count: megatron-core's own
  `num_microbatches_calculator` (the installed oracle, megatron-core 0.16.1); the DeepSpeed forks
  carry an older copy of the same calculator (`megatron/microbatches.py`);
- the rerun state machine: megatron-core's own `get_rerun_state_machine()` (mode disabled, as a
  run without `--rerun-mode` has it);
- counters and objects the skipped lines touch but no data depends on (the DeepSpeed engine's
  step counters, the lr scheduler, logging).

Every `next()` outside a model step is a draw the trainer drops.

Refresh the vendored text (after a `fetch` of each repository) with
`python tests/oracles/trainer_skip.py --write`; the test fails until the hashes match again.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import hashlib
import json
import logging
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

MIRROR = Path(os.environ.get("FORENSICS_UPSTREAM_MIRROR", "/work/.mirror"))
MLM = ("NVIDIA/Megatron-LM", "d98e8a64ddf34856e74b24714e3bedb2f5a39553")
# b4e4d9618e^ (PR #3957 changed `iteration in` to `(iteration + 1) in`; megatron-core < 0.17)
MLM_OLD = ("NVIDIA/Megatron-LM", "ade81bc79d4e811fca8e7fb1fc3c000543e22af9")
BIGSCIENCE = ("bigscience-workshop/Megatron-DeepSpeed", "8387ae17c4704f6579f88a84500b535d19d7fbbf")
ARGONNE = ("argonne-lcf/Megatron-DeepSpeed", "ffa3456d68b630192fcaefcc3288bd18525b8d95")
TRAINING = "megatron/training/training.py"


@dataclass(frozen=True)
class Span:
    """Lines first..last (1-indexed, inclusive) of `path` in `repo` at `commit`."""

    repo: str
    commit: str
    path: str
    first: int
    last: int


SPANS: dict[str, Span] = {
    "megatron-lm/dummy_train_step": Span(*MLM, TRAINING, 2963, 3007),
    "megatron-lm/loop": Span(*MLM, TRAINING, 4554, 4554),
    "megatron-lm/update_num_microbatches": Span(*MLM, TRAINING, 4627, 4627),
    "megatron-lm/skip": Span(*MLM, TRAINING, 4647, 4659),
    "megatron-lm/iteration": Span(*MLM, TRAINING, 4785, 4785),
    "megatron-lm/consumed": Span(*MLM, TRAINING, 4804, 4818),
    "megatron-lm-pre-0.17/dummy_train_step": Span(*MLM_OLD, TRAINING, 1711, 1719),
    "megatron-lm-pre-0.17/loop": Span(*MLM_OLD, TRAINING, 2833, 2833),
    "megatron-lm-pre-0.17/update_num_microbatches": Span(*MLM_OLD, TRAINING, 2887, 2887),
    "megatron-lm-pre-0.17/skip": Span(*MLM_OLD, TRAINING, 2902, 2914),
    "megatron-lm-pre-0.17/iteration": Span(*MLM_OLD, TRAINING, 3004, 3004),
    "megatron-lm-pre-0.17/consumed": Span(*MLM_OLD, TRAINING, 3020, 3034),
    "megatron-deepspeed/argument": Span(*BIGSCIENCE, "megatron/arguments.py", 572, 573),
    "megatron-deepspeed/parse": Span(*BIGSCIENCE, "megatron/arguments.py", 288, 311),
    "megatron-deepspeed/loop": Span(*BIGSCIENCE, "megatron/training.py", 883, 906),
    "megatron-deepspeed/update_num_microbatches": Span(
        *BIGSCIENCE, "megatron/training.py", 913, 913
    ),
    "megatron-deepspeed/counters": Span(*BIGSCIENCE, "megatron/training.py", 931, 936),
    "megatron-deepspeed-argonne/argument": Span(*ARGONNE, "megatron/arguments.py", 1607, 1613),
    "megatron-deepspeed-argonne/parse": Span(*ARGONNE, "megatron/training.py", 1072, 1084),
    "megatron-deepspeed-argonne/loop": Span(*ARGONNE, "megatron/training.py", 1273, 1275),
    "megatron-deepspeed-argonne/update_num_microbatches": Span(
        *ARGONNE, "megatron/training.py", 1277, 1277
    ),
    "megatron-deepspeed-argonne/skip": Span(*ARGONNE, "megatron/training.py", 1295, 1323),
    "megatron-deepspeed-argonne/counters": Span(*ARGONNE, "megatron/training.py", 1358, 1365),
}


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def fetched_text(span: Span, mirror: Path = MIRROR) -> str | None:
    """The span's lines from a fetched copy of its repository (`git show commit:path`), or None
    when this machine has no copy (offline CI)."""
    git_dir = mirror / span.repo.replace("/", "+") / "repo"
    if not git_dir.is_dir():
        return None
    done = subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{span.commit}:{span.path}"],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = done.stdout.splitlines(keepends=True)
    return "".join(lines[span.first - 1 : span.last])


def vendored(name: str) -> str:
    """The vendored text of snippet `name`, refused if it no longer has its recorded hash."""
    from oracles.upstream.trainer_skip_snippets import SNIPPETS

    entry = SNIPPETS[name]
    span = SPANS[name]
    where = (entry["repo"], entry["commit"], entry["path"], entry["first"], entry["last"])
    assert where == (span.repo, span.commit, span.path, span.first, span.last), name
    assert digest(entry["text"]) == entry["sha256"], f"{name}: vendored text was edited"
    return entry["text"]


# -- the stubs: what a cluster supplies ---------------------------------------------------------


class _Tensor:
    """A micro-batch's tensor as the skip code touches it (moved to the GPU, its shape read)."""

    def __init__(self, first: int, size: int) -> None:
        self.first, self.size = first, size
        self.shape = (size,)

    def cuda(self, non_blocking: bool = False) -> _Tensor:
        return self


@dataclass
class Recorder:
    """The data iterator: each `next()` yields the next micro-batch of `unit` global samples and
    records it as trained (inside a model step) or dropped (anywhere else)."""

    position: int
    unit: int
    trained: list[tuple[int, int, int]] = field(default_factory=list)  # (iteration, first, size)
    dropped: list[tuple[int, int]] = field(default_factory=list)  # (first, size)
    _step: int | None = None  # the iteration a model step is training, None outside one

    def __iter__(self) -> Iterator[dict[str, _Tensor]]:
        return self

    def __next__(self) -> dict[str, _Tensor]:
        first, self.position = self.position, self.position + self.unit
        if self._step is None:
            self.dropped.append((first, self.unit))
        elif self.trained and self.trained[-1][0] == self._step:
            it, start, size = self.trained[-1]
            self.trained[-1] = (it, start, size + self.unit)
        else:
            self.trained.append((self._step, first, self.unit))
        tensor = _Tensor(first, self.unit)
        return {"tokens": tensor, "text": tensor}

    def __len__(self) -> int:  # argonne's skipped step logs it under DUMP_SKIPPED_ITERS
        return 0


def _microbatches(rampup: list[int] | None, gbs: int, mbs: int, dp: int) -> Any:
    """megatron-core's calculator, set up as `initialize_megatron` does for this run."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import num_microbatches_calculator as nmc

    nmc.destroy_num_microbatches_calculator()
    logging.getLogger("megatron.core.num_microbatches_calculator").setLevel(logging.WARNING)
    nmc.init_num_microbatches_calculator(0, rampup, gbs, mbs, dp)
    return nmc


@dataclass(frozen=True)
class Run:
    """The run a restarted job resumes: its batch settings and the checkpoint's counters."""

    global_batch_size: int
    micro_batch_size: int
    data_parallel_size: int
    rampup: list[int] | None
    iteration: int  # the loaded checkpoint's iteration
    consumed_samples: int  # the loaded checkpoint's consumed samples
    train_iters: int  # the loop runs while the counter is below this


@dataclass
class Outcome:
    """What the trainer's loop drew, and its counters when it stopped."""

    trained: list[tuple[int, int, int]]  # (iteration logged, first sample, size) per model step
    dropped: list[tuple[int, int]]  # (first sample, size) per micro-batch drawn and dropped
    iteration: int
    consumed_samples: int


def _namespace(run: Run, recorder: Recorder) -> tuple[dict[str, Any], Any]:
    nmc = _microbatches(
        run.rampup, run.global_batch_size, run.micro_batch_size, run.data_parallel_size
    )

    def train_step(data_iterator: Recorder, iteration: int) -> None:
        recorder._step = iteration + 1  # the number the trainer logs for this step
        try:
            for _ in range(nmc.get_num_microbatches()):
                next(data_iterator)
        finally:
            recorder._step = None

    mpu = SimpleNamespace(
        get_data_parallel_world_size=lambda: run.data_parallel_size,
        get_tensor_model_parallel_rank=lambda: 0,
        get_tensor_model_parallel_src_rank=lambda: 0,
        get_tensor_model_parallel_group=lambda: None,
        is_pipeline_first_stage=lambda: True,
        is_pipeline_last_stage=lambda: True,
    )
    names = {
        "train_step": train_step,
        "update_num_microbatches": nmc.update_num_microbatches,
        "get_num_microbatches": nmc.get_num_microbatches,
        "mpu": mpu,
        "_dp_world_size": lambda: run.data_parallel_size,
        "print_rank_0": lambda *a, **k: None,
        "bisect": bisect,
        "collections": collections,
        "os": os,
        "log": logging.getLogger("trainer_skip"),
        "RANK": 0,
    }
    return names, nmc


def _exec(source: str, names: dict[str, Any], function: str) -> Any:
    namespace = dict(names)
    exec(compile(source, f"<{function}>", "exec"), namespace)  # noqa: S102 - the oracle
    return namespace[function]


def _args(run: Run, **more: Any) -> SimpleNamespace:
    return SimpleNamespace(
        train_iters=run.train_iters,
        iteration=run.iteration,
        consumed_train_samples=run.consumed_samples,
        skipped_train_samples=0,
        micro_batch_size=run.micro_batch_size,
        data_parallel_size=run.data_parallel_size,
        perform_rl_step=False,
        rl_use_sequence_packing=False,
        sft=False,
        dataloader_inter_document_masking=False,
        hybrid_context_parallel=False,
        create_attention_mask_in_dataloader=True,
        context_parallel_size=1,
        seq_length=8,
        pipeline_model_parallel_size=1,
        **more,
    )


# -- the loops -------------------------------------------------------------------------------


def _megatron_lm(version: str, flag: str, run: Run) -> Outcome:
    """`--iterations-to-skip` values (argparse `nargs="+", type=int`: the list[int] field of
    TrainingConfig, megatron/training/argument_utils.py:143-146 at d98e8a64dd), the loop's skip
    block and dummy_train_step, as the trainer has them."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations-to-skip", nargs="+", type=int, default=[])
    parsed = parser.parse_args(flag.split())
    recorder = Recorder(run.consumed_samples, run.micro_batch_size * run.data_parallel_size)
    names, _ = _namespace(run, recorder)
    args = _args(run, iterations_to_skip=parsed.iterations_to_skip)

    def get_batch_on_this_tp_rank(data_iterator_or_batch: Any, **kwargs: Any) -> Any:
        # megatron/training/utils.py: on tensor-parallel rank 0 `data = next(data_iterator)`
        # (before d98e8a64dd); at d98e8a64dd dummy_train_step calls next() itself
        if isinstance(data_iterator_or_batch, Recorder):
            return next(data_iterator_or_batch)
        return data_iterator_or_batch

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.rerun_state_machine import get_rerun_state_machine

    names.update(
        get_args=lambda: args,
        get_rerun_state_machine=get_rerun_state_machine,
        get_batch_on_this_tp_rank=get_batch_on_this_tp_rank,
        get_batch_on_this_cp_rank=lambda batch, **kwargs: batch,
        get_context_parallel_group=lambda: None,
        get_hybrid_data_context_parallel_groups=lambda: None,
    )
    names["dummy_train_step"] = _exec(
        vendored(f"{version}/dummy_train_step"), names, "dummy_train_step"
    )
    source = (
        "def train(args, train_data_iterator, iteration):\n"
        "    start_iteration = iteration\n"
        + vendored(f"{version}/loop")
        + vendored(f"{version}/update_num_microbatches")
        + vendored(f"{version}/skip")
        + "        train_step(train_data_iterator, iteration)\n"
        + vendored(f"{version}/iteration")
        + vendored(f"{version}/consumed")
        + "    return iteration\n"
    )
    train = _exec(source, names, "train")
    iteration = train(args, recorder, run.iteration)
    return Outcome(recorder.trained, recorder.dropped, iteration, args.consumed_train_samples)


def _bigscience(flag: str, run: Run) -> Outcome:
    """arguments.py's `--skip-train-iteration-range` and its parse (sort, merge overlaps), then
    train()'s range queue, drain loop and counters."""
    recorder = Recorder(run.consumed_samples, run.micro_batch_size * run.data_parallel_size)
    names, _ = _namespace(run, recorder)
    parser = argparse.ArgumentParser()
    _exec("def add(group):\n" + vendored("megatron-deepspeed/argument"), names, "add")(parser)
    args = _args(run, **vars(parser.parse_args(flag.split())))
    _exec("def parse(args):\n" + vendored("megatron-deepspeed/parse"), names, "parse")(args)
    source = (
        "def train(args, train_data_iterator):\n"
        "    iteration = args.iteration\n"
        + vendored("megatron-deepspeed/loop")
        + vendored("megatron-deepspeed/update_num_microbatches")
        + "        train_step(train_data_iterator, iteration)\n"
        + vendored("megatron-deepspeed/counters")
        + "    return iteration\n"
    )
    iteration = _exec(source, names, "train")(args, recorder)
    return Outcome(recorder.trained, recorder.dropped, iteration, args.consumed_train_samples)


def _argonne(flag: str, run: Run) -> Outcome:
    """arguments.py's `--train-range-to-skip`, train()'s pairs, and its skipped step (a whole
    step of `gradient_accumulation_steps` micro-batches from the DeepSpeed config)."""
    recorder = Recorder(run.consumed_samples, run.micro_batch_size * run.data_parallel_size)
    names, _ = _namespace(run, recorder)
    parser = argparse.ArgumentParser()
    _exec("def add(group):\n" + vendored("megatron-deepspeed-argonne/argument"), names, "add")(
        parser
    )
    unit = run.micro_batch_size * run.data_parallel_size
    args = _args(
        run,
        **vars(parser.parse_args(flag.split())),
        train_tokens=None,
        consumed_train_tokens=0,
        deepspeed_config_dict={"gradient_accumulation_steps": run.global_batch_size // unit},
    )
    engine = SimpleNamespace(
        skipped_steps=0,
        global_steps=0,
        micro_steps=0,
        global_samples=0,
        train_batch_size=lambda: run.global_batch_size,
    )
    scheduler = SimpleNamespace(step=lambda increment: None)
    source = (
        "def train(args, model, opt_param_scheduler, train_data_iterator, iteration):\n"
        "    num_skipped_iters = 0\n"
        + vendored("megatron-deepspeed-argonne/parse")
        + vendored("megatron-deepspeed-argonne/loop")
        + vendored("megatron-deepspeed-argonne/update_num_microbatches")
        + vendored("megatron-deepspeed-argonne/skip")
        + "        else:\n"
        + "            train_step(train_data_iterator, iteration)\n"
        + vendored("megatron-deepspeed-argonne/counters")
        + "    return iteration\n"
    )
    train = _exec(source, names, "train")
    iteration = train(args, [engine], scheduler, recorder, run.iteration)
    return Outcome(recorder.trained, recorder.dropped, iteration, args.consumed_train_samples)


def run_trainer(trainer: str, flag: str, run: Run) -> Outcome:
    """Trainer `trainer`'s own skip code, given `flag` as it is pasted, from `run`'s checkpoint
    until its counter reaches `run.train_iters`. megatron-core's globals (the micro-batch
    calculator, the rerun state machine) are cleared afterwards, as a later test expects."""
    loops = {
        "megatron-lm": lambda: _megatron_lm("megatron-lm", flag, run),
        "megatron-lm-pre-0.17": lambda: _megatron_lm("megatron-lm-pre-0.17", flag, run),
        "megatron-deepspeed": lambda: _bigscience(flag, run),
        "megatron-deepspeed-argonne": lambda: _argonne(flag, run),
    }
    try:
        return loops[trainer]()
    finally:
        from megatron.core import num_microbatches_calculator, rerun_state_machine

        num_microbatches_calculator.destroy_num_microbatches_calculator()
        rerun_state_machine.destroy_rerun_state_machine()


# -- refreshing the vendored text ----------------------------------------------------------------


def write_snippets(path: Path) -> None:
    """Write `upstream/trainer_skip_snippets.py` from the fetched repositories."""
    parts = [
        "# ruff: noqa\n",
        "# Verbatim lines of the trainers' skip code (repository, commit, file, lines, sha256\n",
        "# of the text), written by `python tests/oracles/trainer_skip.py --write` from\n",
        "# `fetch`ed copies; tests/forensics/skip/test_skip_upstream.py holds them to their\n",
        "# hashes and, where a copy is on the machine, to the source. Do not edit: refresh.\n",
        "SNIPPETS = {\n",
    ]
    for name, span in SPANS.items():
        text = fetched_text(span)
        if text is None:
            raise SystemExit(f"{span.repo}: not fetched under {MIRROR}")
        quote = '"""' if '"""' not in text else "'''"  # as ruff format would choose
        assert quote not in text and not text.endswith("\\\n"), name
        q = json.dumps
        parts.append(
            f"    {q(name)}: {{\n"
            f"        {q('repo')}: {q(span.repo)},\n"
            f"        {q('commit')}: {q(span.commit)},\n"
            f"        {q('path')}: {q(span.path)},\n"
            f"        {q('first')}: {span.first},\n"
            f"        {q('last')}: {span.last},\n"
            f"        {q('sha256')}: {q(digest(text))},\n"
            f"        {q('text')}: r{quote}{text}{quote},\n"
            "    },\n"
        )
    parts.append("}\n")
    path.write_text("".join(parts))


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: trainer_skip.py --write")
    write_snippets(Path(__file__).resolve().parent / "upstream" / "trainer_skip_snippets.py")
    print(f"wrote {len(SPANS)} snippets")
