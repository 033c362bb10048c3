"""Static (query-agnostic) passage pruning before search: BM25 over SciFact and NPL with the
lowest-scored share of the documents deleted (``Index.prune``, ``salience search prune``),
against random pruning of the same share, in one run.

The score is chosen on the dev split: every text statistic of the data domain
(``salience.data.scorers.STATISTICS``) at 25% on both sets' dev queries; the default
(``words``: the shortest passages go first) is judged on the test split, at 10%, 25% and 40%,
beside random pruning (mean and spread over 5 seeds). Target (issue 29): at least 25% of the
passages pruned with nDCG@10 within 0.005 of the full index on the test split.

    python bench/prune.py --write BENCHMARKS.md
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

from common import SHARED_DATA, run_benchmark, search_set, split_heading  # noqa: E402

SETS = ("scifact", "npl")
FRACTIONS = (0.1, 0.25, 0.4)
RANDOM_SEEDS = 5


def _ndcg(index, queries: dict, qrels) -> float:
    from salience import Run
    from salience.core.metrics import evaluate

    hits = index.search_batch(list(queries.values()), k=10)
    run = Run({q: {doc_id: float(score) for doc_id, score in found} for q, found in zip(queries, hits)})
    return evaluate(qrels, run, "ndcg@10")["ndcg@10"]


def _pruned(docs, scores, fraction):
    from salience.search import BM25

    index = BM25().fit(docs)
    if fraction:
        index.prune(scores, fraction=fraction)
    return index


def _statistics(docs) -> dict:
    from salience.data.scorers import text_statistics

    return text_statistics([(d.get("title", "") + " " + d.get("text", "")).strip() for d in docs])


def run(args) -> dict:
    from salience.core.scores import Scores
    from salience.data.scorers import STATISTICS

    result = {"dev": [], "test": []}
    for name in SETS:
        set_dir = SHARED_DATA / "search" / name
        for split in ("dev", "test"):
            docs, queries, qrels = search_set(set_dir, split)
            ids = [str(d["_id"]) for d in docs]
            stats = _statistics(docs)
            full = _ndcg(_pruned(docs, None, 0), queries, qrels)
            relevant = {d for q in qrels for d, grade in qrels[q].items() if grade > 0}
            chosen = STATISTICS if split == "dev" else (args.by,)
            fractions = (0.25,) if split == "dev" else FRACTIONS
            for fraction in fractions:
                for stat in chosen:
                    started = time.perf_counter()
                    scores = Scores(stats[stat].astype(float), ids=ids)
                    index = _pruned(docs, scores, fraction)
                    kept = set(index.ids)
                    result[split].append({"set": name, "by": stat, "fraction": fraction, "full": full,
                                          "ndcg": _ndcg(index, queries, qrels),
                                          "relevant_pruned": len(relevant - kept), "relevant": len(relevant),
                                          "seconds": time.perf_counter() - started})
                randoms = []
                for seed in range(RANDOM_SEEDS):
                    scores = Scores(np.random.default_rng(seed).random(len(ids)), ids=ids)
                    randoms.append(_ndcg(_pruned(docs, scores, fraction), queries, qrels))
                result[split].append({"set": name, "by": "random", "fraction": fraction, "full": full,
                                      "ndcg": float(np.mean(randoms)), "spread": float(np.std(randoms))})
            print(f"{name} {split} done", file=sys.stderr, flush=True)
    return result


def render(result: dict, command: str, seconds: float) -> str:
    lines = ["## Static passage pruning: BM25 with the lowest-scored passages deleted, against random", "",
             f"`{command}` ({seconds / 60:.0f} minutes, 2 cores). nDCG@10 of the full index and of the pruned one; "
             "random: mean ± sd over 5 seeds.", "",
             f"**Choice on the {split_heading('dev')}** (every text statistic at 25%):", "",
             "| set | pruned by (lowest first) | full | pruned | change | relevant documents pruned |",
             "|---|---|---:|---:|---:|---:|"]
    for r in result["dev"]:
        spread = f" ± {r['spread']:.4f}" if "spread" in r else ""
        lost = f"{r['relevant_pruned']} of {r['relevant']}" if "relevant" in r else ""
        lines.append(f"| {r['set']} | {r['by']} | {r['full']:.4f} | {r['ndcg']:.4f}{spread} | "
                     f"{r['ndcg'] - r['full']:+.4f} | {lost} |")
    lines += ["", f"**Judged on the {split_heading('test')}** (the statistic chosen on dev):", "",
              "| set | pruned by | share pruned | full | pruned | change | relevant documents pruned | within 0.005 |",
              "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in result["test"]:
        spread = f" ± {r['spread']:.4f}" if "spread" in r else ""
        lost = f"{r['relevant_pruned']} of {r['relevant']}" if "relevant" in r else ""
        met = "yes" if r["ndcg"] >= r["full"] - 0.005 else "no"
        lines.append(f"| {r['set']} | {r['by']} | {r['fraction']:.0%} | {r['full']:.4f} | {r['ndcg']:.4f}{spread} | "
                     f"{r['ndcg'] - r['full']:+.4f} | {lost} | {met} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--by", default="words", help="the statistic judged on the test split (chosen on dev)")
    return run_benchmark("prune.py", parser, run, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
