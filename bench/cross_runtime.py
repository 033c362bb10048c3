"""A trained cross-encoder's runtimes side by side: torch fp32, bf16 autocast, dynamic int8 and
ONNX Runtime, on SciFact's **test** split (BM25's top 20 reranked, the judge alone and
interpolated with BM25 at the weight bench/train_rerank.py chose on dev), in one process run:
nDCG@10, the largest score difference from fp32, and seconds per query (fastest of
``--repeats`` passes over the queries, 2 threads).

The model is one bench/train_rerank.py trained (its ``--work`` folder), so run that first:

    python bench/train_rerank.py --write BENCHMARKS.md
    python bench/cross_runtime.py --model /tmp/salience-train-rerank/cross-scifact --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import SHARED_DATA, run_benchmark, search_set, split_heading  # noqa: E402
from train_rerank import MAX_LENGTH, _reranked, _text  # noqa: E402

RUNTIMES = (("fp32", "torch"), ("bf16", "torch"), ("int8", "torch"), ("fp32", "onnx"))


def _dev_weight(model: Path) -> float:
    """The weight bench/train_rerank.py chose on SciFact's dev split for this model at depth 20."""
    rows = json.loads((model.parent / "result.json").read_text())["rows"]
    return next(r["weight"] for r in rows if r["set"] == "scifact" and r["stage"] == "BM25" and r["depth"] == 20
                and r["mode"] == "+ first stage" and r.get("trained_on") == "scifact")


def run(args) -> dict:
    import torch

    from salience import Run, evaluate
    from salience.models.cross_encoder import CrossEncoder
    from salience.search import BM25

    torch.set_num_threads(2)
    folder = SHARED_DATA / "search" / "scifact"
    corpus, queries, qrels = search_set(folder, "test")
    docs = [{"id": str(d["_id"]), "title": d.get("title", ""), "text": d.get("text", "")} for d in corpus]
    texts = {d["id"]: _text(d) for d in docs}
    found = BM25().index(docs).search_batch(list(queries.values()), k=100)
    top = {q: (list(r.ids), np.asarray(r.values, dtype=np.float64)) for q, r in zip(queries, found)}
    weight = args.weight if args.weight is not None else _dev_weight(Path(args.model))
    rows, exact = [], None
    for precision, backend in RUNTIMES:
        cross = CrossEncoder(args.model, max_length=MAX_LENGTH, precision=precision, backend=backend)
        cross.scores("warm", ["up"])  # loaded (and exported) before the clock starts
        best = float("inf")
        for _ in range(args.repeats):
            start = time.perf_counter()
            scores = {q: cross.scores(queries[q], [texts[i] for i in ids[:20]]) for q, (ids, _) in top.items()}
            best = min(best, (time.perf_counter() - start) / len(top))
        exact = scores if exact is None else exact
        row = {"precision": precision, "backend": backend, "seconds": best,
               "max_difference": max(float(np.abs(scores[q] - exact[q]).max()) for q in top)}
        for mode, w in (("alone", 1.0), ("interpolated", weight)):
            reranked = _reranked(top, scores, 20, w)
            run_ = Run({q: dict(zip(ids, s.tolist())) for q, (ids, s) in reranked.items()})
            row[mode] = float(evaluate(qrels, run_, ["ndcg@10"], missing="skip").means["ndcg@10"])
        rows.append(row)
        print(row, file=sys.stderr, flush=True)
    return {"rows": rows, "weight": weight, "model": json.loads((Path(args.model) / "cross.json").read_text())}


def render(result: dict, command: str, seconds: float) -> str:
    fp32 = result["rows"][0]
    lines = [f"## A trained cross-encoder's runtimes, SciFact {split_heading('test')} (BM25's top 20)", "",
             f"`{command}` ({seconds:.0f} s in all). The model trained by bench/train_rerank.py on SciFact "
             f"({result['model']['steps']} steps); interpolated with BM25 at weight {result['weight']} (chosen on dev "
             "there); seconds per query, fastest of the repeats, 2 threads.", "",
             "| precision | backend | nDCG@10 alone | interpolated | vs fp32 (interpolated) | largest score difference "
             "| s/query | speed vs fp32 |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['precision']} | {r['backend']} | {r['alone']:.4f} | {r['interpolated']:.4f} | "
                     f"{r['interpolated'] - fp32['interpolated']:+.4f} | {r['max_difference']:.4f} | "
                     f"{r['seconds']:.3f} | {fp32['seconds'] / r['seconds']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="a cross-encoder folder bench/train_rerank.py trained")
    parser.add_argument("--weight", type=float, default=None,
                        help="interpolation weight (default: the one bench/train_rerank.py chose on dev)")
    parser.add_argument("--repeats", type=int, default=2)
    return run_benchmark("cross_runtime.py", parser, run, render, argv)

if __name__ == "__main__":
    raise SystemExit(main())
