"""Build a small but real Megatron run with a dirty crawl batch, for the demo, tests and benchmark.

What is real: the text (harvested from the installed packages, `demo.texts`), the BPE
tokenizer (trained here with `tokenizers`), the `.bin/.idx` files (the shared writer, byte-for-byte
megatron-core's format), the manifests, the blend schedule with a mixture switch, and the run
config. What is simulated, and says so: the training log. No model is trained; its loss curve is a
smooth power law with noise and a malignant spike (one that does not come back down) shortly after
the dirty crawl batch enters the blend.

Layout of a run directory:

    forensics.yaml              the run config (paths relative to it)
    tokenizer.json              byte-level BPE, EOD token <|endoftext|> = id 0
    data/<name>_text_document.{bin,idx}
    data/<name>.manifest.parquet    doc_id, source, crawl_batch, domain, url (one row per doc)
    checkpoints/iter_NNNNNNN/   empty checkpoint directories (what the run saved)
    logs/train.log              Megatron-format training log (SIMULATED loss curve)
    truth.json                  the ground truth: which crawl batch is dirty, its documents
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dataloaders.atomic import write_json_atomic, write_parquet_atomic, write_text_atomic
from dataloaders.megatron.indexed import IndexedDataset, optimal_dtype, write_indexed_dataset
from dataloaders.megatron.manifests import CHECK_COLUMNS, document_checks
from forensics.errors import ForensicsError
from forensics.pipeline import module_version
from forensics_testing.demo.dirty import DIRTY_KINDS, dirty_page, site_name, web_page
from forensics_testing.demo.texts import Text, harvest

EOD = "<|endoftext|>"


@dataclass(frozen=True)
class DemoSpec:
    """Everything that shapes a generated run. The defaults are the demo's."""

    name: str = "forensics-demo"
    seed: int = 1234
    seq_length: int = 256
    global_batch_size: int = 32
    train_iters: int = 4000
    switch_iteration: int = 2201  # mixture switch: web_v2 (with the dirty batch) joins
    spike_iteration: int = 2260
    checkpoint_interval: int = 100
    log_tail: int = 520  # iterations logged after the spike (it never recovered) until stopped
    dirty_kind: str = "mixed"
    docs_prose: int = 1200
    docs_code: int = 1000
    docs_per_crawl: int = 150
    crawls_v1: int = 4  # clean crawl batches of `web` (in the blend from iteration 1)
    crawls_v2: int = 3  # crawl batches of `web_v2`, the last one dirty
    blend_before: dict[str, float] = field(
        default_factory=lambda: {"prose": 0.5, "code": 0.3, "web": 0.2}
    )
    blend_after: dict[str, float] = field(
        default_factory=lambda: {"prose": 0.35, "code": 0.25, "web": 0.15, "web_v2": 0.25}
    )
    vocab_size: int = 8000
    split: str = "98,2,0"

    def __post_init__(self) -> None:
        if self.dirty_kind not in DIRTY_KINDS:
            raise ValueError(f"dirty_kind must be one of {DIRTY_KINDS}")
        if not 1 < self.switch_iteration <= self.spike_iteration < self.train_iters:
            raise ValueError("need 1 < switch_iteration <= spike_iteration < train_iters")


# The demo's story (a mixture switch, a dirty crawl batch, a malignant spike) at the smallest size
# that still tells it: the run the demo and watch tests build in seconds.
TINY = DemoSpec(
    seed=99,
    dirty_kind="mixed",
    docs_prose=120,
    docs_code=80,
    docs_per_crawl=20,
    vocab_size=1500,
    train_iters=600,
    switch_iteration=301,
    spike_iteration=330,
    log_tail=30,
)


@dataclass
class _Doc:
    text: str
    facets: dict[str, str | None]
    dirty: str | None = None  # what is wrong with it, for the truth file


def _crawl_names(spec: DemoSpec) -> list[str]:
    """Crawl batch names, weekly from a seed-dependent start (the last one is the dirty one)."""
    rng = random.Random(spec.seed)
    start = rng.randint(1, 20)
    n = spec.crawls_v1 + spec.crawls_v2
    return [f"crawl-2026-w{start + 2 * i:02d}" for i in range(n)]


HARVEST_CAP = 8000  # harvested texts per kind; larger specs recombine them (benchmarks)
TOKENIZER_TEXTS = 20000  # the tokenizer is trained on at most this many clean documents


def recombine(pool: list[Text], n: int, seed: int) -> list[Text]:
    """`n` texts: the pool first, then new ones made of 2-4 random paragraphs of pool texts.

    Lets a benchmark build a corpus of 100k+ distinct documents from the few thousand real
    texts a machine has, without repeating a document verbatim (near-duplicates stay rare).
    """
    if len(pool) >= n:
        return pool[:n]
    rng = random.Random(seed)
    paragraphs = [(p, t) for t in pool for p in t.text.split("\n\n") if p.strip()]
    out = list(pool)
    while len(out) < n:
        picks = [rng.choice(paragraphs) for _ in range(rng.randint(2, 4))]
        text = "\n\n".join(p for p, _ in picks)
        first = picks[0][1]
        out.append(Text(text, first.package, first.origin, first.file))
    return out


def _documents(spec: DemoSpec) -> dict[str, list[_Doc]]:
    """The four datasets' documents (text + manifest facets), deterministic for the spec."""
    n_web = (spec.crawls_v1 + spec.crawls_v2) * spec.docs_per_crawl
    n_prose = spec.docs_prose + n_web
    found = harvest(min(n_prose, HARVEST_CAP), min(spec.docs_code, HARVEST_CAP), seed=spec.seed)
    if not found["prose"] or not found["code"]:
        raise RuntimeError("this machine has no Python package text to build a demo run from")
    prose_pool = recombine(found["prose"], n_prose, spec.seed + 2)
    code_pool = recombine(found["code"], spec.docs_code, spec.seed + 3)
    rng = random.Random(spec.seed + 1)
    datasets: dict[str, list[_Doc]] = {"prose": [], "code": [], "web": [], "web_v2": []}
    for t in prose_pool[: spec.docs_prose]:
        facets = {"source": f"pypi-{t.origin}", "crawl_batch": None, "domain": t.package}
        datasets["prose"].append(_Doc(t.text, facets | {"url": f"file://{t.file}"}))
    for t in code_pool[: spec.docs_code]:
        facets = {"source": "pypi-code", "crawl_batch": None, "domain": t.package}
        datasets["code"].append(_Doc(t.text, facets | {"url": f"file://{t.file}"}))
    web_texts = iter(prose_pool[spec.docs_prose :])
    crawls = _crawl_names(spec)
    for i, crawl in enumerate(crawls):
        target = "web" if i < spec.crawls_v1 else "web_v2"
        dirty = i == len(crawls) - 1
        # a crawl batch visits a few sites, several pages each (as crawls do)
        hosts = [site_name(rng) for _ in range(max(3, spec.docs_per_crawl // 6))]
        for j in range(spec.docs_per_crawl):
            host = rng.choice(hosts)
            body = next(web_texts).text
            if dirty:
                text, what = dirty_page(spec.dirty_kind, j, body, rng)
            else:
                text, what = web_page(body, host, rng), None
            facets = {
                "source": "web-crawl",
                "crawl_batch": crawl,
                "domain": host,
                "url": f"https://{host}/{crawl}/{j:05d}",
            }
            datasets[target].append(_Doc(text, facets, what))
    for docs in datasets.values():  # crawl order is not .idx order
        rng.shuffle(docs)
    return datasets


def _train_tokenizer(texts: list[str], vocab_size: int, path: Path) -> Any:
    """Byte-level BPE (every byte sequence, mojibake included, round-trips), EOD = id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(str(path))
    return tok


def _write_dataset(prefix: Path, token_lists: list[list[int]], vocab: int) -> None:
    write_indexed_dataset(prefix, (np.asarray(t) for t in token_lists), optimal_dtype(vocab))


def refresh_manifest_checks(run: Path) -> None:
    """Rewrite the check columns (doc_tokens, doc_hash) of every `data/NAME.manifest.parquet`
    from its dataset `data/NAME_text_document` as it is now: for a test that rewrites a
    dataset's documents after the build (another tokenizer, dirt of its own), as a user re-runs
    `forensics manifest --prefix` after re-tokenizing."""
    import polars as pl

    for path in sorted((run / "data").glob("*.manifest.parquet")):
        prefix = path.with_name(path.name.removesuffix(".manifest.parquet") + "_text_document")
        facets = pl.read_parquet(path).drop(CHECK_COLUMNS, strict=False)
        checks = document_checks(IndexedDataset(prefix))
        write_parquet_atomic(pl.concat([facets, checks], how="horizontal"), path, overwrite=True)


def _write_manifest(path: Path, docs: list[_Doc], prefix: Path) -> None:
    """The manifest `forensics manifest --prefix` writes: facets, then doc_tokens and doc_hash
    of the dataset at `prefix`."""
    import polars as pl

    table = pl.DataFrame(
        {
            "doc_id": pl.Series(range(len(docs)), dtype=pl.Int64),
            **{
                k: pl.Series([d.facets[k] for d in docs], dtype=pl.Utf8)
                for k in ("source", "crawl_batch", "domain", "url")
            },
        }
    )
    table = pl.concat([table, document_checks(IndexedDataset(prefix))], how="horizontal")
    write_parquet_atomic(table, path)


def config_dict(spec: DemoSpec, data_dir: str = "data") -> dict[str, Any]:
    """The run config (as YAML-ready data), paths relative to the config's directory."""

    def blend(weights: dict[str, float]) -> list[dict[str, Any]]:
        return [
            {
                "name": name,
                "prefix": f"{data_dir}/{name}_text_document",
                "weight": w,
                "manifest": f"{data_dir}/{name}.manifest.parquet",
            }
            for name, w in weights.items()
        ]

    return {
        "name": spec.name,
        "data": {
            "format": "megatron",
            "seed": spec.seed,
            "seq_length": spec.seq_length,
            "split": spec.split,
            "stages": [
                {"start_iteration": 1, "blend": blend(spec.blend_before)},
                {"start_iteration": spec.switch_iteration, "blend": blend(spec.blend_after)},
            ],
        },
        "training": {"global_batch_size": spec.global_batch_size, "train_iters": spec.train_iters},
        "tokenizer": "tokenizer.json",
        "checkpoint_dir": "checkpoints",
        "log": "logs/train.log",
    }


def simulated_loss(spec: DemoSpec) -> list[tuple[int, float, float]]:
    """(iteration, lm loss, grad norm) up to spike + log_tail. SIMULATED, not trained.

    A power-law decline with noise; after the switch a slow creep, then at the spike a jump
    that settles on a plateau well above the pre-spike level (malignant: it does not recover).
    The grad norm rises a few iterations before the loss, as BLOOM-176B's did.
    """
    rng = np.random.default_rng(spec.seed)
    out = []
    last = spec.spike_iteration + spec.log_tail
    creep_len = max(1, spec.spike_iteration - spec.switch_iteration)
    for it in range(1, last + 1):
        base = 2.1 + 6.5 * (1 + it / 30) ** -0.42
        loss = base + rng.normal(0, 0.02 + 0.01 * base / 4)
        gnorm = 0.25 + 2.0 * (1 + it / 50) ** -0.6 + abs(rng.normal(0, 0.04))
        if it >= spec.switch_iteration:
            frac = min(1.0, (it - spec.switch_iteration) / creep_len)
            loss += 0.08 * frac**2
        if it >= spec.spike_iteration - 4:
            gnorm *= 6.0 if it < spec.spike_iteration + 10 else 2.5
        if it >= spec.spike_iteration:
            k = it - spec.spike_iteration
            loss += 1.8 + 1.2 * math.exp(-k / 4)  # jump +3, then a plateau 1.8 above
        out.append((it, float(loss), float(gnorm)))
    return out


def megatron_log_lines(spec: DemoSpec) -> list[str]:
    """The simulated curve as Megatron-LM `training_log` lines (format of megatron/training)."""
    lines = [
        "# forensics demo: THIS LOSS CURVE IS SIMULATED (no model was trained); the data order, "
        "tokens and documents are real.",
        f"using world size: 1, data-parallel size: 1, global batch size: {spec.global_batch_size}",
    ]
    lr_max = 3e-4
    for it, loss, gnorm in simulated_loss(spec):
        lr = lr_max * min(1.0, it / 200) * (0.5 * (1 + math.cos(math.pi * it / spec.train_iters)))
        lines.append(
            f" iteration {it:8d}/{spec.train_iters:8d} | consumed samples: "
            f"{it * spec.global_batch_size:12d} | elapsed time per iteration (ms): "
            f"{95.0 + (it * 7919) % 13:.1f} | learning rate: {lr:.6E} | global batch size: "
            f"{spec.global_batch_size:5d} | lm loss: {loss:.6E} | loss scale: 1.0 | "
            f"grad norm: {gnorm:.3f} | number of skipped iterations:   0 | "
            "number of nan iterations:   0 |"
        )
        if spec.checkpoint_interval and it % spec.checkpoint_interval == 0:
            lines.append(
                f"  successfully saved checkpoint from iteration {it:7d} to checkpoints "
                "[ t 1/1, p 1/1 ]"
            )
    lines.append("[E] job stopped by the operator after a loss spike")
    return lines


def build_run(out: Path, spec: DemoSpec | None = None, *, progress: bool = True) -> dict[str, Any]:
    """Write a complete run under `out`; returns the truth (also written to truth.json).

    Refuses to write into a non-empty directory that is not a previous demo run.
    """
    import yaml

    spec = spec or DemoSpec()
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / "truth.json").is_file():
        raise ForensicsError(f"{out}: exists and is not a generated run; choose another directory")
    say = print if progress else (lambda *a, **k: None)

    say(f"harvesting text from installed packages (seed {spec.seed}) ...")
    datasets = _documents(spec)
    say("training a byte-level BPE tokenizer ...")
    clean_texts = [d.text for docs in datasets.values() for d in docs if d.dirty is None]
    clean_texts = clean_texts[:TOKENIZER_TEXTS]  # a sample is enough to learn the merges
    out.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(clean_texts, spec.vocab_size, out / "tokenizer.json")
    eod = tok.token_to_id(EOD)
    say("tokenizing and writing .bin/.idx and manifests ...")
    token_counts: dict[str, int] = {}
    for name, docs in datasets.items():
        encoded = tok.encode_batch([d.text for d in docs])
        token_lists = [e.ids + [eod] for e in encoded]
        token_counts[name] = sum(len(t) for t in token_lists)
        _write_dataset(out / "data" / f"{name}_text_document", token_lists, tok.get_vocab_size())
        _write_manifest(
            out / "data" / f"{name}.manifest.parquet", docs, out / "data" / f"{name}_text_document"
        )

    for it in range(
        spec.checkpoint_interval, spec.spike_iteration + spec.log_tail + 1, spec.checkpoint_interval
    ):
        (out / "checkpoints" / f"iter_{it:07d}").mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "logs" / "train.log", "\n".join(megatron_log_lines(spec)) + "\n")
    write_text_atomic(
        out / "forensics.yaml",
        "# Generated by scripts/build_demo_run.py: a real Megatron data layout, a simulated log.\n"
        + yaml.safe_dump(config_dict(spec), sort_keys=False),
    )
    crawls = _crawl_names(spec)
    dirty_ids = [i for i, d in enumerate(datasets["web_v2"]) if d.dirty is not None]
    truth = {
        "spec": asdict(spec),
        "dirty_dataset": "web_v2",
        "dirty_crawl_batch": crawls[-1],
        "dirty_kind": spec.dirty_kind,
        "dirty_doc_ids": dirty_ids,
        "dirty_what": {
            what: sum(1 for d in datasets["web_v2"] if d.dirty == what)
            for what in ("mojibake", "spam")
        },
        "clean_crawl_batches": crawls[:-1],
        "documents": {k: len(v) for k, v in datasets.items()},
        "tokens": token_counts,
        "switch_iteration": spec.switch_iteration,
        "spike_iteration": spec.spike_iteration,
        "note": "the loss curve in logs/train.log is simulated; data, tokens and order are real",
        "builder": module_version("forensics_testing.demo"),
    }
    write_json_atomic(out / "truth.json", truth)
    return truth


def relocated_config(spec: DemoSpec, run_dir: str) -> str:
    """The run config as seen from another directory (configs/demo.yaml points at demo-run/)."""
    import yaml

    cfg = config_dict(spec, data_dir=f"{run_dir}/data")
    cfg["tokenizer"] = f"{run_dir}/tokenizer.json"
    cfg["checkpoint_dir"] = f"{run_dir}/checkpoints"
    cfg["log"] = f"{run_dir}/logs/train.log"
    return (
        "# The demo run (scripts/demo.sh builds it in demo-run/ with scripts/build_demo_run.py;\n"
        "# its loss curve is simulated, its data order real). Paths are relative to this file.\n"
        + yaml.safe_dump(cfg, sort_keys=False)
    )


def load_truth(run_dir: Path) -> dict[str, Any]:
    """The ground truth written by `build_run`."""
    return json.loads((Path(run_dir) / "truth.json").read_text())
