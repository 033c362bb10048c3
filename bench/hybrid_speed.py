"""Hybrid search against its two sides, queries per second in one run (issue 54: the hybrid at
>= 0.8x the speed of its slower side).

For each shared search set, BM25 (Lucene, the library default) and a dense index with the
static encoder of ``search distill`` (plain distillation, ``bench/hybrid_rule.py``'s folder,
distilled when missing) over the corpus, and ``Hybrid(bm25, dense)`` with its default rule.
The test-split queries are searched as one batch (``search_batch``, one thread each, the
hybrid's two sides in two threads as it runs them) at the depth of ``search evaluate`` (top
1,000) and at the hybrid's default depth (top 100). Each system is timed in rounds that rotate
which system opens them, each timed call after an untimed one of the same system; the best
round counts.

    python bench/hybrid_speed.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import SHARED_DATA, run_benchmark, search_set, split_heading

import hybrid_rule

SETS = ("scifact", "npl", "cranfield")


def measure(set_name: str, encoder: str, depths: tuple[int, ...], rounds: int) -> list[dict]:
    from salience.search import BM25, Dense, Hybrid

    corpus, queries, _ = search_set(SHARED_DATA / "search" / set_name, "test")
    docs = [{"_id": r["_id"], "title": r.get("title", ""), "text": r.get("text", "")} for r in corpus]
    bm25 = BM25().index(docs)
    dense = Dense(encoder=encoder).index(docs)
    hybrid = Hybrid(bm25, dense)
    texts = list(queries.values())
    rows = []
    for depth in depths:
        systems = {"BM25": bm25, "dense (static)": dense, "hybrid": hybrid}
        best = dict.fromkeys(systems, 0.0)
        for system in systems.values():
            system.search_batch(texts, k=depth)  # compiled kernels and caches warm
        names = list(systems)
        for r in range(rounds):
            for name in names[r % len(names):] + names[: r % len(names)]:
                # untimed first: the timed call pays for no thread or cache another system left
                # (numpy's BLAS helper spins on a core for a while after the dense side's products)
                systems[name].search_batch(texts, k=depth)
                started = time.perf_counter()
                systems[name].search_batch(texts, k=depth)
                best[name] = max(best[name], len(texts) / (time.perf_counter() - started))
        slower = min(best["BM25"], best["dense (static)"])
        rows.append({"set": set_name, "documents": len(docs), "queries": len(texts), "depth": depth, **best,
                     "ratio": best["hybrid"] / slower})
        print(f"{set_name} top {depth}: " + ", ".join(f"{n} {q:,.0f} q/s" for n, q in best.items()), flush=True)
    return rows


def run(args) -> dict:
    encoder = hybrid_rule.encoder_folder(Path(args.work), "plain distillation", "scifact")
    rows = []
    for set_name in SETS:
        if (SHARED_DATA / "search" / set_name).exists():
            rows += measure(set_name, encoder, (1000, 100), args.rounds)
    return {"rows": rows, "rounds": args.rounds}


def render(result: dict, command: str, seconds: float) -> str:
    lines = ["## Hybrid search against its two sides (`bench/hybrid_speed.py`)", "",
             f"Queries of each set's {split_heading('test')} searched as one batch by BM25, by a dense index with "
             "the static encoder (plain distillation of all-MiniLM-L6-v2) and by `Hybrid(bm25, dense)` with its "
             "default rule (min-max weighted sum, dense weight 0.2). Top 1,000 is `search evaluate`'s depth, top "
             "100 the hybrid's default. The hybrid fuses the sides' rows of index positions (unsorted) in a "
             "compiled kernel and names only the fused top k. It runs on two threads: one encodes the dense "
             "queries and computes the products while the other searches BM25, then both take the products' "
             "top k, 16 rows at a time; numpy's BLAS is held to one thread meanwhile (its idle helper spins on "
             "the core BM25 needs). The dense side alone uses BLAS's two threads. Best of "
             f"{result['rounds']} rounds, each round opened by the next system; each timed call follows an untimed "
             "one of the same system, so none pays for threads another left spinning (numpy's BLAS helper spins "
             "on a core after the dense side's products: a hybrid batch right after one took 1.6x as long).", "",
             f"Command: `{command}` ({seconds:.0f} s)", "",
             "| set (test split) | documents | queries | top | BM25 q/s | dense q/s | hybrid q/s | hybrid / slower side |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        lines.append(f"| {row['set']} | {row['documents']:,} | {row['queries']} | {row['depth']:,} | {row['BM25']:,.0f} | "
                     f"{row['dense (static)']:,.0f} | {row['hybrid']:,.0f} | {row['ratio']:.2f}x |")
    met = [row for row in result["rows"] if row["ratio"] >= 0.8]
    lines += ["", f"Target (issue 54): the hybrid >= 0.8x its slower side's queries/s: met on {len(met)} of "
                  f"{len(result['rows'])} rows.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default=str(Path(__file__).resolve().parents[1] / "bench-out"))
    parser.add_argument("--rounds", type=int, default=7)
    if not (SHARED_DATA / "search").exists():
        print("skipping: the shared search sets are absent", file=__import__("sys").stderr)
        return 0
    return run_benchmark("hybrid_speed.py", parser, run, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
