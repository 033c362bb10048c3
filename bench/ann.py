"""Approximate dense search: HNSW (faiss) against salience's exact blocked search.

For SciFact and NPL (../shared/data/search), the documents are encoded once (all-MiniLM-L6-v2,
ONNX Runtime), then every judged query is searched exactly and through HNSW graphs (32 links
per node) at several ``ef_search``: recall@10 and recall@100 of the approximate results
against the exact ones, nDCG@10 against the judgments, queries per second of the search alone
(the queries' vectors computed beforehand), and the graph's build time.

    python bench/ann.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))
from common import search_set, split_heading, write_section  # noqa: E402

from salience import Run, evaluate  # noqa: E402
from salience.search import Dense  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "search"
EF = (32, 64, 128, 256)


def run(name: str) -> list[dict]:
    root = DATA / name
    corpus, queries, qrels = search_set(root, "test")
    judged = list(queries)
    index = Dense().index([{"id": d["_id"], "title": d.get("title", ""), "text": d.get("text", "")} for d in corpus])
    vectors = index._queries([queries[q] for q in judged])
    rows = []

    def timed(k):
        start = time.perf_counter()
        results = index._search_vectors(vectors, k, None)
        return results, len(judged) / (time.perf_counter() - start)

    index.approximate = None
    exact100, qps = timed(100)
    exact10 = [s.take(np.arange(min(10, len(s)))) for s in exact100]
    ndcg = evaluate(qrels, Run(dict(zip(judged, exact100))), "ndcg@10").means["ndcg@10"]
    rows.append({"collection": name, "docs": len(corpus), "system": "exact (blocked float32 products)", "ef": None,
                 "recall10": 1.0, "recall100": 1.0, "ndcg": ndcg, "qps": qps, "build_s": None})
    index.approximate = "hnsw"
    start = time.perf_counter()
    index._hnsw()
    build = time.perf_counter() - start
    for ef in EF:
        index.ef_search = ef
        approx100, qps = timed(100)
        approx10, _ = timed(10)
        recall10 = np.mean([len(set(a.ids) & set(b.ids)) / max(len(b), 1) for a, b in zip(approx10, exact10)])
        recall100 = np.mean([len(set(a.ids) & set(b.ids)) / max(len(b), 1) for a, b in zip(approx100, exact100)])
        ndcg = evaluate(qrels, Run(dict(zip(judged, approx100))), "ndcg@10").means["ndcg@10"]
        rows.append({"collection": name, "docs": len(corpus), "system": "HNSW (faiss, M=32)", "ef": ef,
                     "recall10": recall10, "recall100": recall100, "ndcg": ndcg, "qps": qps, "build_s": build})
    return rows


def render(rows, command) -> str:
    import faiss

    lines = ["## Approximate dense search (`bench/ann.py`)", "", f"Command: `{command}`", "",
             f"all-MiniLM-L6-v2 vectors (ONNX Runtime); faiss {faiss.__version__} IndexHNSWFlat, inner product; the "
             f"judged queries of each collection's {split_heading('test')}. Recall: the approximate top k's overlap "
             "with the exact top k. Queries/s: search only, all those queries in one batch, 2 cores.", "",
             "| collection | documents | system | ef_search | recall@10 | recall@100 | nDCG@10 | queries/s | graph build s |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        ef = "" if r["ef"] is None else r["ef"]
        build = "" if r["build_s"] is None else f"{r['build_s']:.2f}"
        lines.append(f"| {r['collection']} | {r['docs']:,} | {r['system']} | {ef} | {r['recall10']:.4f} | "
                     f"{r['recall100']:.4f} | {r['ndcg']:.4f} | {r['qps']:.0f} | {build} |")
    lines += ["", "At these sizes exact search is already fast; the graph pays off as collections grow (the scale "
              "benchmark of issue 13 is still to come)."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", default="scifact,npl")
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args(argv)
    command = "python bench/ann.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = [row for name in args.collections.split(",") for row in run(name)]
    section = render(rows, command.strip())
    print(section)
    if args.write:
        write_section(args.write, section, marker="bench/ann.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
