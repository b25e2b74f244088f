"""`forensics rebuild`: the block list of a spike removed from the data, written as new files.

From a spike directory's `skip.json` and the run config it was made for, it writes into `--out`:

    <prefix>.bin / .idx          each blocked dataset without the block list's documents
    <prefix>.manifest.parquet    provenance of the copy: doc_id (new), original_doc_id, facets,
                                 doc_tokens and doc_hash of the copy's documents
    rebuilt.yaml                 the rebuilt run's config: `forensics replay --config` on it gives
                                 the data order of the restart (the original before it)
    restart-rebuilt.flags        the first launch of the restart: the checkpoint pin (where it
                                 is a flag), `--data-path` and, when a later data stage
                                 follows, `--exit-interval` (forensics.rebuild.launches)
    restart-rebuilt-from-S.flags one more launch per later data stage, from iteration S
    data_path.txt, data_path-from-S.txt   each launch's `--data-path` line alone
    rebuild.json / rebuild.md    what was removed, the new blends, and what changes

A Hugging Face, OLMo-core or MosaicML streaming run whose block list is whole files gets
rebuilt.yaml without those files, `<stream>_rebuilt/` folders (index.json of the kept shards,
linked), the restart's file list (data_files.json, restart-rebuilt.flags or streams.json) and
rebuild.json / rebuild.md (forensics.rebuild.files); part of a file is refused in one line.

The output rule is every command's (forensics.outputs): nothing is replaced without --force, no
input of the run is ever an output, and files appear together or not at all (staging folder,
then one publish).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from dataloaders.atomic import write_parquet_atomic
from dataloaders.families import family_of
from dataloaders.megatron.filtered import write_without_documents
from dataloaders.megatron.indexed import IndexedDataset
from dataloaders.megatron.manifests import CHECK_COLUMNS, document_checks
from dataloaders.run_config import RunConfig, config_from_dict, load_config
from dataloaders.storage import upload
from dataloaders.storage.urls import scheme_of
from forensics.errors import ForensicsError
from forensics.inputs_guard import check_unchanged, input_stats
from forensics.outputs import check_output_dir, hold_lock, publish, run_inputs
from forensics.publish_set import finish_before_writing
from forensics.rebuild.files import plan_files, rebuilt_file_config, stage_files
from forensics.rebuild.launches import data_path_file
from forensics.rebuild.plan import RECIPES, RebuildPlan, plan_rebuild, rebuilt_config
from forensics.rebuild.texts import write_file_texts, write_texts
from forensics.replay import open_replayer
from forensics.skip.plan import SkipPlan
from forensics.skip.validate import validate_for_run

SUMMARY_FILE = "rebuild.json"
NOTE_FILE = "rebuild.md"
CONFIG_FILE = "rebuilt.yaml"
DATA_PATH_FILE = "data_path.txt"
FLAGS_FILE = "restart-rebuilt.flags"
FIXED_FILES = (SUMMARY_FILE, NOTE_FILE, CONFIG_FILE, DATA_PATH_FILE, FLAGS_FILE)


@dataclass
class RebuildResult:
    """What a rebuild wrote: the output folder, the plan, per-dataset counts, the summary."""

    out: Path
    plan: RebuildPlan
    counts: dict[str, dict[str, Any]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # the skip file's run moved, ...

    @property
    def config_path(self) -> Path:
        return self.out / CONFIG_FILE


def output_names(plan: RebuildPlan) -> list[str]:
    """Every file name the rebuild publishes into --out (one flags and one data_path file per
    launch of the restart)."""
    names = [SUMMARY_FILE, NOTE_FILE, CONFIG_FILE]
    for i, launch in enumerate(plan.launches):
        names += [launch.file, data_path_file(i, launch.first)]
    for _spec, prefix in plan.datasets.values():
        names += [f"{prefix.name}.bin", f"{prefix.name}.idx", f"{prefix.name}.manifest.parquet"]
    return names


def check_outputs(out: Path, config: RunConfig, names: list[str], force: bool) -> None:
    """Refuse before any work: an existing output without --force, or an output that is one of
    the run's own files (e.g. --out pointing at the data folder)."""
    check_output_dir(out, names, force=force)
    inputs = {Path(p).resolve() for p in run_inputs(config)}
    clash = [n for n in names if (out / n).resolve() in inputs]
    if clash:
        raise ForensicsError(
            f"--out {out}: {clash[0]} would replace an input of the run; choose another folder"
        )


def filtered_manifest(spec: Any, kept: np.ndarray) -> pl.DataFrame:
    """The copy's manifest: new doc_id 0..K-1, the source's doc_id as `original_doc_id`, and the
    source manifest's facets (manifest columns are strings, as `forensics manifest` writes)."""
    table = pl.DataFrame({"original_doc_id": kept.astype(np.int64)})
    path = spec.manifest or Path(f"{spec.prefix}.manifest.parquet")
    if Path(path).is_file():
        source = pl.read_parquet(path).with_columns(pl.col("doc_id").cast(pl.Int64))
        table = table.join(
            source.rename({"doc_id": "original_doc_id"}), on="original_doc_id", how="left"
        )
    return table.with_columns(
        pl.int_range(0, pl.len(), dtype=pl.Int64).alias("doc_id"),
        pl.col("original_doc_id").cast(pl.Utf8),
    ).select("doc_id", pl.exclude("doc_id"))


def write_datasets(plan: RebuildPlan, staging: Path) -> dict[str, dict[str, Any]]:
    """The filtered `.bin/.idx` and manifest of each blocked dataset, into `staging`."""
    counts = {}
    for name, (spec, prefix) in plan.datasets.items():
        drop = np.asarray(plan.skip.documents[name], dtype=np.int64)
        done = write_without_documents(spec.prefix, drop, staging / prefix.name, remote=spec.remote)
        table = filtered_manifest(spec, done.kept).drop(CHECK_COLUMNS, strict=False)
        checks = document_checks(IndexedDataset(staging / prefix.name))  # the copy's own
        write_parquet_atomic(
            pl.concat([table, checks], how="horizontal"),
            staging / f"{prefix.name}.manifest.parquet",
        )
        total = done.tokens_kept + done.tokens_dropped
        counts[name] = {
            "source": spec.remote or str(spec.prefix),
            "rebuilt": str(prefix),
            "documents_kept": int(done.kept.size),
            "documents_removed": int(done.dropped.size),
            "tokens_kept": done.tokens_kept,
            "tokens_removed": done.tokens_dropped,
            "share_of_tokens_removed": done.tokens_dropped / total if total else 0.0,
        }
    return counts


def run_rebuild(
    skip_file: Path,
    config: RunConfig,
    out: Path | None = None,
    *,
    force: bool = False,
    keep: str = "share",
    upload_to: str | None = None,
) -> RebuildResult:
    """The whole command; every refusal comes before anything is written. `keep`: the weight
    recipe of a rebuilt dataset (forensics.rebuild.plan.RECIPES)."""
    if keep not in RECIPES:
        raise ForensicsError(f"--keep {keep!r}: give one of {', '.join(RECIPES)}")
    inputs = input_stats(config)
    skip = SkipPlan.read(skip_file)
    result_notes = validate_for_run(skip_file, skip, config)
    out = Path(out) if out is not None else skip_file.parent.parent / f"rebuild-{skip.step}"
    out = out.resolve()
    if upload_to is not None:
        check_upload_to(upload_to, config)
    finish_before_writing(out, out / ".cache", "forensics rebuild", force=force)
    if not family_of(config).rebuilds_documents:
        result = run_file_rebuild(skip, skip_file, config, out, force, inputs)
        result.notes = result_notes
        return result
    plan = plan_rebuild(config, skip, out, keep, upload_to)
    raw = rebuilt_config_checked(config, plan, out)
    names = output_names(plan)
    check_outputs(out, config, names, force)

    result = RebuildResult(out=out, plan=plan, notes=result_notes)
    with staged(out) as staging:
        result.counts = write_datasets(plan, staging)
        result.summary = write_texts(plan, raw, result.counts, staging, skip_file, out)
        check_unchanged(config, inputs, "rebuild")
        if plan.upload_to:
            upload_copies(plan, staging, force)
        publish(staging, out, previous_outputs(out))
    verify_published(out / CONFIG_FILE)
    return result


def check_upload_to(upload_to: str, config: RunConfig) -> None:
    """`--upload-to`: an s3:// prefix, for a Megatron run (the file families rebuild lists)."""
    if scheme_of(upload_to) != "s3":
        raise ForensicsError(f"--upload-to {upload_to}: give an s3:// prefix")
    if not family_of(config).rebuilds_documents:
        raise ForensicsError(
            "--upload-to: this family's rebuild writes no data files (its file list names the "
            "kept files where they are)"
        )


def upload_copies(plan: RebuildPlan, staging: Path, force: bool) -> None:
    """Each filtered copy's .bin and .idx under `plan.upload_to` (an existing object is kept
    unless --force), before anything is published."""
    assert plan.upload_to is not None
    for _spec, prefix in plan.datasets.values():
        for suffix in (".bin", ".idx"):
            name = f"{prefix.name}{suffix}"
            upload(staging / name, f"{plan.upload_to}/{name}", "default-session", overwrite=force)


@contextmanager
def staged(out: Path) -> Iterator[Path]:
    """The staging folder under `out`, held under the rebuild's lock. A rebuild that fails or
    is interrupted before it publishes leaves nothing: the staged files go, and so does `out`
    when this rebuild created it."""
    created = not out.exists()
    lock = hold_lock(out / ".cache", "forensics rebuild")
    staging = out / ".cache" / "staging"
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        yield staging
    except BaseException:
        lock.close()
        shutil.rmtree(out if created else staging, ignore_errors=True)
        raise
    lock.close()


def run_file_rebuild(
    skip: SkipPlan, skip_file: Path, config: RunConfig, out: Path, force: bool, inputs: Any
) -> RebuildResult:
    """A file-based run (forensics.rebuild.files): the rebuilt config without the blocked files,
    the new stream folders, the restart lines; refused in one line for part of a file."""
    plan = plan_files(config, skip, open_replayer(config), out)
    raw = rebuilt_file_config(config, plan)
    config_from_dict(json.loads(json.dumps(raw)), base_dir=out, source=None)
    folders = [p.name for p in plan.streams.values()]
    check_outputs(
        out, config, ["rebuild.json", "rebuild.md", CONFIG_FILE, *plan.restart, *folders], force
    )
    result = RebuildResult(out=out, plan=plan, counts=plan.counts())  # type: ignore[arg-type]
    with staged(out) as staging:
        stage_files(plan, config, staging)
        result.summary = write_file_texts(plan, raw, staging, skip_file, out)
        check_unchanged(config, inputs, "rebuild")
        publish(staging, out, previous_outputs(out))  # replaces an earlier rebuild's folders
    verify_published(out / CONFIG_FILE)
    return result


def rebuilt_config_checked(config: RunConfig, plan: RebuildPlan, out: Path) -> dict[str, Any]:
    """The rebuilt config as a mapping, validated as a config before anything is written."""
    raw = rebuilt_config(config, plan)
    config_from_dict(json.loads(json.dumps(raw)), base_dir=out, source=None)
    return raw


def previous_outputs(out: Path) -> list[str]:
    """The files an earlier rebuild into `out` published (from its rebuild.json), so that a
    --force rerun removes the ones it no longer writes and nothing else."""
    try:
        files = json.loads((out / SUMMARY_FILE).read_text()).get("files", [])
    except (OSError, ValueError, AttributeError, RecursionError):
        return list(FIXED_FILES)
    return [f for f in files if isinstance(f, str) and "/" not in f] + list(FIXED_FILES)


def verify_published(config_path: Path) -> None:
    """Open the rebuilt run as replay will (every `.bin/.idx` pair checked, manifests sized)."""
    open_replayer(load_config(config_path))
