"""How ``BM25(pruning="auto")`` decides which queries to prune, chosen on dev data only.

A synthetic collection of ``bench/scale.py``'s kind with its own seed (not the one
``bench/pruning.py`` judges on), with its own seeded queries (``scale`` and ``zipf`` kinds) and
the shared sets' **dev** queries moved onto its vocabulary by frequency rank. Every query is
timed both ways on the packed, memory-mapped index (pruned and exhaustive, top 10, one
thread, each query repeated 5 times, best of 3), and pruned both ways: block-max MaxScore and
block-max WAND. A rule prunes a query of at most 5 terms, with one of the two kernels, when its
longest posting list holds at least P postings and at least a share S of the query's; each
(kernel, P, S) is scored by the total time of all queries under it. The best is the library's
default (:mod:`salience.search.pruning`).

Exhaustive scoring reads the precomputed contributions of the longest lists
(:mod:`salience.search.score_cache`) at the library's default budget; that budget is chosen
first, on the same queries: every query searched as the library does (``pruning="auto"``) at
each budget of ``BUDGETS``, and the default is the smallest within 10% of the fastest.

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

from salience.search.pruning import KERNELS as STRATEGIES  # noqa: E402

MIN_POSTINGS = (1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 17)
SHARES = (0.0, 0.8, 0.9, 0.95, 0.98)
BUDGETS = (0, 64, 128, 256, 512, 1024)  # MiB of precomputed contributions


def budget_times(folder: Path, query_sets: dict) -> list[dict]:
    """Every query searched as the library does, at each score-cache budget: a fresh index,
    one pass to fill its cache, then the best of 3."""
    from salience.search import BM25

    rows = []
    for budget in BUDGETS:
        index = BM25.load(folder, verify=False)
        index.score_cache_mb = budget
        encoded = [[q for q in index._encode_queries(queries) if q] for queries in query_sets.values()]
        best = [float("inf")] * len(encoded)
        for _ in range(4):
            for i, batch in enumerate(encoded):
                started = time.perf_counter()
                index._search_rows(batch, 10, None)
                best[i] = min(best[i], time.perf_counter() - started)
        cache = index._score_cache()
        rows.append({"budget": budget, "seconds": sum(best), "held": cache.nbytes / 2**20 if cache else 0.0})
    return rows


def per_query_times(index, queries: list[str], repeats: int = 5) -> list[dict]:
    from salience.search.pruning import pruned_top_k
    from salience.search.topk import top_k_packed_numba

    packed, norms, cache = index._packed, index._length_norms(), index._score_cache()
    encoded = [q for q in index._encode_queries(queries) if q]
    top_k_packed_numba(packed, norms, index._idf, index.variant, index.k1, index.delta, encoded, 10, None, cache=cache)
    rows = []
    for terms in encoded:
        batch = [terms] * repeats
        exhaustive = float("inf")
        pruned = dict.fromkeys(STRATEGIES, float("inf"))
        for _ in range(3):
            started = time.perf_counter()
            top_k_packed_numba(packed, norms, index._idf, index.variant, index.k1, index.delta, batch, 10, None,
                               cache=cache)
            exhaustive = min(exhaustive, time.perf_counter() - started)
            for strategy in STRATEGIES:
                started = time.perf_counter()
                pruned_top_k(index, batch, 10, None, strategy=strategy)
                pruned[strategy] = min(pruned[strategy], time.perf_counter() - started)
        held = packed.counts[terms]
        rows.append({"terms": len(terms), "postings": int(held.sum()), "longest": int(held.max()),
                     "exhaustive": exhaustive / repeats, **{s: t / repeats for s, t in pruned.items()}})
    return rows


def rule_time(rows: list[dict], strategy: str, min_postings: int, share: float) -> float:
    return sum(r[strategy] if r["terms"] <= 5 and r["longest"] >= min_postings and r["longest"] >= share * r["postings"]
               else r["exhaustive"] for r in rows)


def run(args) -> dict:
    from salience.search import BM25

    vocabulary, probabilities, lengths = scale.source_statistics()
    query_sets = {"scale": scale.synthetic_queries(vocabulary, probabilities, seed=11),
                  "zipf": pruning.zipf_queries(vocabulary, probabilities, seed=12),
                  "mapped (dev)": pruning.mapped_queries(vocabulary, split="dev")}
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        folder = Path(args.index) if args.index else Path(tmp) / "ix"
        if not folder.exists():
            docs = scale.synthetic_corpus(args.size, vocabulary, probabilities, lengths, seed=7)
            BM25(fields=("text",), store_documents=False).build(({"id": i, "text": t} for i, t in docs), folder)
        budgets = budget_times(folder, query_sets)
        index = BM25.load(folder, verify=False)
        rows = [row for queries in query_sets.values() for row in per_query_times(index, queries)]
    grid = {(k, p, s): rule_time(rows, k, p, s) for k in STRATEGIES for p in MIN_POSTINGS for s in SHARES}
    by_terms = {}
    for r in rows:
        cell = by_terms.setdefault(min(r["terms"], 6), {"queries": 0, "exhaustive": 0.0, **dict.fromkeys(STRATEGIES, 0.0)})
        cell["queries"] += 1
        for key in ("exhaustive", *STRATEGIES):
            cell[key] += r[key]
    return {"size": args.size, "queries": len(rows), "budgets": budgets, "grid": [[k, p, s, t] for (k, p, s), t in grid.items()],
            "exhaustive": sum(r["exhaustive"] for r in rows), "pruned": {k: sum(r[k] for r in rows) for k in STRATEGIES},
            "fastest": {k: sum(1 for r in rows if r[k] < min(r[o] for o in ("exhaustive", *STRATEGIES) if o != k))
                        for k in ("exhaustive", *STRATEGIES)},
            "by_terms": {str(t): cell for t, cell in sorted(by_terms.items())},
            "oracle": sum(min(r["exhaustive"], *(r[k] for k in STRATEGIES)) for r in rows)}


def render_budgets(rows: list[dict]) -> list[str]:
    from salience.search import BM25

    fastest = min(r["seconds"] for r in rows)
    chosen = min(r["budget"] for r in rows if r["seconds"] <= 1.10 * fastest)
    default = BM25().score_cache_mb
    lines = ["The score cache's budget (`score_cache_mb`), chosen first: every query searched as the library does "
             "(`pruning=\"auto\"`), a fresh index at each budget, best of 3 after a pass that fills the cache:", "",
             "| budget (MiB) | held (MiB) | seconds | against no cache |", "|---:|---:|---:|---:|"]
    none = next(r["seconds"] for r in rows if r["budget"] == 0)
    for r in rows:
        lines.append(f"| {r['budget']:,} | {r['held']:.0f} | {r['seconds']:.3f} | {none / r['seconds']:.2f}x |")
    lines += ["", f"The smallest budget within 10% of the fastest: {chosen:,} MiB (the library's default: "
                  f"{default:g} MiB). The rule below is chosen with the cache at the library's default.", ""]
    return lines


def render(result: dict, command: str, seconds: float) -> str:
    from salience.search.pruning import AUTO_MIN_POSTINGS, AUTO_MIN_SHARE, AUTO_STRATEGY

    grid = sorted(result["grid"], key=lambda row: row[3])
    best = grid[0]
    pruned = result["pruned"]
    fastest = result["fastest"]
    lines = ["## Dynamic pruning's `auto` rule, chosen on dev (`bench/pruning_rule.py`)", "",
             f"A synthetic collection of {result['size']:,} documents (seed 7; `bench/pruning.py` judges on seed 0) "
             f"and {result['queries']} dev queries (its own `scale` and `zipf` queries, seeds 11 and 12, and the shared "
             "sets' **dev** queries moved onto it by frequency rank), each timed exhaustive and pruned by block-max "
             "MaxScore and by block-max WAND on the packed, memory-mapped index (top 10, one thread). A rule prunes a "
             "query of at most 5 terms, with one of the two kernels, whose longest list holds >= P postings and >= S "
             "of the query's. Total seconds for all the queries:", "",
             f"Command: `{command}` ({seconds:.0f} s)", "",
             *render_budgets(result["budgets"]),
             f"Every query exhaustive: {result['exhaustive']:.3f} s; every query by block-max MaxScore: "
             f"{pruned['maxscore']:.3f} s; by block-max WAND: {pruned['bmw']:.3f} s; the fastest of the three for each "
             f"query (no rule can beat it): {result['oracle']:.3f} s. The fastest of the three: exhaustive on "
             f"{fastest['exhaustive']} queries, MaxScore on {fastest['maxscore']}, WAND on {fastest['bmw']}.", "",
             "By the query's number of terms (seconds, all the queries of that length):", "",
             "| terms | queries | exhaustive | maxscore | bmw |", "|---:|---:|---:|---:|---:|"]
    for terms, cell in result["by_terms"].items():
        label = f"{terms}+" if terms == "6" else terms
        lines.append(f"| {label} | {cell['queries']} | {cell['exhaustive']:.3f} | {cell['maxscore']:.3f} | "
                     f"{cell['bmw']:.3f} |")
    lines += ["", "The ten best rules:", "", "| kernel | P (postings) | S (share) | seconds | against exhaustive |",
              "|---|---:|---:|---:|---:|"]
    for strategy, p, s, t in grid[:10]:
        lines.append(f"| {strategy} | {p:,} | {s:.2f} | {t:.3f} | {result['exhaustive'] / t:.3f}x |")
    library = next(t for k, p, s, t in result["grid"]
                   if k == AUTO_STRATEGY and p == AUTO_MIN_POSTINGS and s == AUTO_MIN_SHARE)
    tied = [f"({k}, {p:,}, {s:.2f})" for k, p, s, t in grid if t <= best[3] * 1.005]
    lines += ["", f"Best in this run: {best[0]}, P = {best[1]:,}, S = {best[2]:.2f}; within 0.5% of it (timing noise): "
                  f"{', '.join(tied)}. The library's rule (`AUTO_STRATEGY` = \"{AUTO_STRATEGY}\", `AUTO_MIN_POSTINGS` = "
                  f"{AUTO_MIN_POSTINGS:,}, `AUTO_MIN_SHARE` = {AUTO_MIN_SHARE:.2f}) takes {library:.3f} s, "
                  f"{(library / best[3] - 1) * 100:.1f}% above this run's best.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--work", default=None, help="folder for the index (a temporary folder by default)")
    parser.add_argument("--index", default=None,
                        help="the dev collection's index folder, kept: read if it exists, else built there "
                             "(--size documents, seed 7)")
    if not scale.RAW.exists():
        print(f"skipping: {scale.RAW} is absent (the shared evaluation data)", file=sys.stderr)
        return 0
    return run_benchmark("pruning_rule.py", parser, run, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
