"""RAG context packing benchmark: recall of relevant passages that fit a prompt's token budget.

For SciFact and NPL (../shared/data/search), BM25 retrieves 30 passages per judged query.
Budgets of 256, 512 and 1024 tokens (salience's approximate_tokens count of title + text).
Systems: top-k truncation (rank order until the first passage that does not fit), skip-fill
(rank order, skipping passages that do not fit), and salience's knapsack over calibrated
relevance probabilities, with and without the expected-F1 cut-off. Calibration is two-fold:
fitted on the odd-numbered judged queries, applied to the even ones, and the other way round.
Recall = relevant passages chosen / relevant passages (mean over queries).

    python bench/pack.py --write BENCHMARKS.md
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

from salience.search import BM25, ScoreCalibrator, pack  # noqa: E402
from salience.search.pack import approximate_tokens  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "search"
BUDGETS = (256, 512, 1024)


def skip_fill(ranked, lengths, tokens):
    chosen, used = [], 0
    for item in ranked.ids:
        if used + lengths[item] <= tokens:
            chosen.append(item)
            used += lengths[item]
    return chosen


def run(name: str, depth: int) -> list[dict]:
    root = DATA / name
    corpus, queries, qrels = search_set(root, "test")
    _, dev_queries, dev_qrels = search_set(root, "dev")
    judged = [q for q in queries if any(g > 0 for g in qrels[q].values())]
    dev = [q for q in dev_queries if any(g > 0 for g in dev_qrels[q].values())]
    index = BM25().index([{"id": d["_id"], "title": d.get("title", ""), "text": d.get("text", "")} for d in corpus])
    rankings = dict(zip(dev + judged, index.search_batch([dev_queries[q] for q in dev] + [queries[q] for q in judged],
                                                         k=depth)))
    lengths = {d["_id"]: approximate_tokens(f"{d.get('title', '')} {d.get('text', '')}") for d in corpus}
    calibrator = ScoreCalibrator().fit({q: rankings[q] for q in dev}, dev_qrels)  # fitted on dev, applied to test
    probabilities = {q: calibrator.probabilities(rankings[q]) for q in judged}
    rows = []
    for tokens in BUDGETS:
        systems = {
            "top-k truncation": lambda q: pack(rankings[q], lengths, tokens=tokens, method="topk").ids,
            "rank order, skipping what does not fit": lambda q: skip_fill(rankings[q], lengths, tokens),
            "salience knapsack (calibrated)": lambda q: pack(probabilities[q], lengths, tokens=tokens).ids,
            "salience knapsack + expected-F1 cut-off": lambda q: pack(probabilities[q], lengths, tokens=tokens,
                                                                      cutoff="f1").ids,
        }
        for system, choose in systems.items():
            recall, count, used = [], [], []
            start = time.perf_counter()
            for q in judged:
                if min(lengths[i] for i in rankings[q].ids) > tokens:
                    chosen = []  # nothing fits
                else:
                    chosen = choose(q)
                relevant = {d for d, g in qrels[q].items() if g > 0}
                recall.append(len(relevant & set(chosen)) / len(relevant))
                count.append(len(chosen))
                used.append(sum(lengths[i] for i in chosen))
            rows.append({"collection": name, "tokens": tokens, "system": system, "recall": float(np.mean(recall)),
                         "passages": float(np.mean(count)), "used": float(np.mean(used)),
                         "ms": 1000 * (time.perf_counter() - start) / len(judged)})
    return rows


def render(rows, command, depth) -> str:
    lines = ["## RAG context packing (`bench/pack.py`)", "", f"Command: `{command}`", "",
             f"BM25 top {depth} per judged query of each collection's {split_heading('test')}; passage tokens by "
             "salience's approximate_tokens (title + text). Recall of the relevant passages that the chosen set holds "
             "(mean over queries); passages and tokens used per query; ms per query for the choice (the score "
             "calibration fitted on the dev split's queries).", "",
             "| collection | budget | system | recall | passages | tokens used | ms/query |", "|---|---:|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['collection']} | {r['tokens']} | {r['system']} | {r['recall']:.4f} | {r['passages']:.2f} | "
                     f"{r['used']:.0f} | {r['ms']:.2f} |")
    lines += ["", "Target (issue 13): packing beats top-k truncation at every budget.", "",
              "| collection | budget | knapsack vs top-k truncation | met |", "|---|---:|---|---|"]
    for (collection, tokens) in dict.fromkeys((r["collection"], r["tokens"]) for r in rows):
        group = {r["system"]: r["recall"] for r in rows if r["collection"] == collection and r["tokens"] == tokens}
        ours, theirs = group["salience knapsack (calibrated)"], group["top-k truncation"]
        lines.append(f"| {collection} | {tokens} | {ours:.4f} vs {theirs:.4f} | {'yes' if ours > theirs else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", default="scifact,npl")
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args(argv)
    command = "python bench/pack.py " + " ".join(argv if argv is not None else sys.argv[1:])
    rows = [row for name in args.collections.split(",") for row in run(name, args.depth)]
    section = render(rows, command.strip(), args.depth)
    print(section)
    if args.write:
        write_section(args.write, section, marker="bench/pack.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
