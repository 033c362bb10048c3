"""How ``BM25(pruning="auto")`` decides which queries to prune, chosen on dev data only.

A synthetic collection of ``bench/scale.py``'s kind with its own seed (not the one
``bench/pruning.py`` judges on), with its own seeded queries (``scale`` and ``zipf`` kinds) and
the shared sets' **dev** queries moved onto its vocabulary by frequency rank. Every query is
timed both ways on the packed, memory-mapped index (pruned and exhaustive, top 10, one
thread, each query repeated 5 times, best of 3). A rule prunes a query of at most 5 terms when
its longest posting list holds at least P postings and at least a share S of the query's; each
(P, S) is scored by the total time of all queries under it. The best is the library's default
(:mod:`salience.search.pruning`).

    python bench/pruning_rule.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from common import run_benchmark

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pruning  # noqa: E402
import scale  # noqa: E402

MIN_POSTINGS = (1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 17)
SHARES = (0.0, 0.8, 0.9, 0.95, 0.98)


def per_query_times(index, queries: list[str], repeats: int = 5) -> list[dict]:
    from salience.search.pruning import pruned_top_k
    from salience.search.topk import top_k_packed_numba

    packed, norms = index._packed, index._length_norms()
    rows = []
    for terms in (q for q in index._encode_queries(queries) if q):
        batch = [terms] * repeats
        exhaustive = pruned = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            top_k_packed_numba(packed, norms, index._idf, index.variant, index.k1, index.delta, batch, 10, None)
            exhaustive = min(exhaustive, time.perf_counter() - started)
            started = time.perf_counter()
            pruned_top_k(index, batch, 10, None)
            pruned = min(pruned, time.perf_counter() - started)
        held = packed.counts[terms]
        rows.append({"terms": len(terms), "postings": int(held.sum()), "longest": int(held.max()),
                     "exhaustive": exhaustive / repeats, "pruned": pruned / repeats})
    return rows


def rule_time(rows: list[dict], min_postings: int, share: float) -> float:
    return sum(r["pruned"] if r["terms"] <= 5 and r["longest"] >= min_postings and r["longest"] >= share * r["postings"]
               else r["exhaustive"] for r in rows)


def run(args) -> dict:
    from salience.search import BM25

    vocabulary, probabilities, lengths = scale.source_statistics()
    query_sets = {"scale": scale.synthetic_queries(vocabulary, probabilities, seed=11),
                  "zipf": pruning.zipf_queries(vocabulary, probabilities, seed=12),
                  "mapped (dev)": pruning.mapped_queries(vocabulary, split="dev")}
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        docs = scale.synthetic_corpus(args.size, vocabulary, probabilities, lengths, seed=7)
        BM25(fields=("text",), store_documents=False).build(({"id": i, "text": t} for i, t in docs), Path(tmp) / "ix")
        index = BM25.load(Path(tmp) / "ix", verify=False)
        rows = [row for queries in query_sets.values() for row in per_query_times(index, queries)]
    grid = {(p, s): rule_time(rows, p, s) for p in MIN_POSTINGS for s in SHARES}
    return {"size": args.size, "queries": len(rows), "grid": [[p, s, t] for (p, s), t in grid.items()],
            "exhaustive": sum(r["exhaustive"] for r in rows), "pruned": sum(r["pruned"] for r in rows),
            "oracle": sum(min(r["exhaustive"], r["pruned"]) for r in rows)}


def render(result: dict, command: str, seconds: float) -> str:
    grid = sorted(result["grid"], key=lambda row: row[2])
    best = grid[0]
    lines = ["## Dynamic pruning's `auto` rule, chosen on dev (`bench/pruning_rule.py`)", "",
             f"A synthetic collection of {result['size']:,} documents (seed 7; `bench/pruning.py` judges on seed 0) "
             f"and {result['queries']} dev queries (its own `scale` and `zipf` queries, seeds 11 and 12, and the shared "
             "sets' **dev** queries moved onto it by frequency rank), each timed pruned and exhaustive on the packed, "
             "memory-mapped index (top 10, one thread). A rule prunes a query of at most 5 terms whose longest list "
             "holds >= P postings and >= S of the query's. Total seconds for all the queries:", "",
             f"Command: `{command}` ({seconds:.0f} s)", "",
             f"Every query exhaustive: {result['exhaustive']:.3f} s; every query pruned: {result['pruned']:.3f} s; "
             f"the better of the two for each query (no rule can beat it): {result['oracle']:.3f} s.", "",
             "| P (postings) | S (share) | seconds | against exhaustive |", "|---:|---:|---:|---:|"]
    for p, s, t in grid[:10]:
        lines.append(f"| {p:,} | {s:.2f} | {t:.3f} | {result['exhaustive'] / t:.3f}x |")
    from salience.search.pruning import AUTO_MIN_POSTINGS, AUTO_MIN_SHARE

    library = next(t for p, s, t in result["grid"] if p == AUTO_MIN_POSTINGS and s == AUTO_MIN_SHARE)
    tied = [f"({p:,}, {s:.2f})" for p, s, t in grid if t <= best[2] * 1.005]
    lines += ["", f"Best in this run: P = {best[0]:,}, S = {best[1]:.2f}; within 0.5% of it (timing noise): "
                  f"{', '.join(tied)}. The library's rule (`AUTO_MIN_POSTINGS` = {AUTO_MIN_POSTINGS:,}, "
                  f"`AUTO_MIN_SHARE` = {AUTO_MIN_SHARE:.2f}) takes {library:.3f} s, "
                  f"{(library / best[2] - 1) * 100:.1f}% above this run's best.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--work", default=None, help="folder for the index (a temporary folder by default)")
    if not scale.RAW.exists():
        print(f"skipping: {scale.RAW} is absent (the shared evaluation data)", file=sys.stderr)
        return 0
    return run_benchmark("pruning_rule.py", parser, run, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
