"""Static (query-agnostic) pruning before search: BM25 over SciFact and NPL with the lowest-scored
share of the passages deleted (``salience.search.prune_passages``, ``salience search prune``), or
of whole documents (``Index.prune``), against random pruning of the same share and unit, in one run.

Everything is chosen on the dev split: the unit (whole documents; sentences; sentences packed up
to 50 words, about an MS MARCO passage) and the score (every text statistic of the data domain,
``salience.data.scorers.STATISTICS``), at 25% on both sets' dev queries; the pair whose worse
set loses least is judged on the test split at 10%, 25% and 40%, beside random pruning of the
same unit (mean and spread over 5 seeds). Target (issue 29): at least 25% of the passages pruned
with nDCG@10 within 0.005 of the full index on the test split.

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
UNITS = {"document": None, "sentence": 0, "passage of <= 50 words": 50}


def _ndcg(index, queries: dict, qrels) -> float:
    from salience import Run
    from salience.core.metrics import evaluate

    hits = index.search_batch(list(queries.values()), k=10)
    run = Run({q: {doc_id: float(score) for doc_id, score in found} for q, found in zip(queries, hits)})
    return evaluate(qrels, run, "ndcg@10")["ndcg@10"]


def _statistic(name):
    from salience.data.scorers import text_statistics

    return lambda texts: text_statistics(list(texts))[name].astype(float)


def _random(seed):
    return lambda texts: np.random.default_rng(seed).random(len(texts))


def _pruned(docs, unit, score, fraction):
    """A BM25 index of ``docs`` with the lowest-``score``d share of the unit deleted, and the
    share of the words that went."""
    from salience.core.scores import Scores
    from salience.search import BM25
    from salience.search.passage_pruning import prune_passages

    if not fraction:
        return BM25().fit(docs), 0.0
    if UNITS[unit] is None:
        index = BM25().fit(docs)
        ids = index.ids
        texts = [" ".join(index.document(i).get(f) or "" for f in index.fields_) for i in ids]
        gone = set(index.prune(Scores(np.asarray(score(texts), dtype=float), ids=ids), fraction=fraction))
        words = np.array([len(t.split()) for t in texts])
        return index, float(words[[i in gone for i in ids]].sum() / words.sum())
    result = prune_passages(docs, score, fraction=fraction, max_words=UNITS[unit])
    before = sum(len(" ".join(d.get(f, "") or "" for f in ("title", "text")).split()) for d in docs)
    after = sum(len(" ".join(d.fields.values()).split()) for d in result.documents)
    return BM25().fit([{"id": d.id, **d.fields} for d in result.documents]), 1 - after / before


def _row(name, unit, by, fraction, full, docs, queries, qrels, score) -> dict:
    started = time.perf_counter()
    index, words_gone = _pruned(docs, unit, score, fraction)
    return {"set": name, "unit": unit, "by": by, "fraction": fraction, "full": full, "ndcg": _ndcg(index, queries, qrels),
            "words_pruned": words_gone, "documents_left": index.n_docs, "documents": len(docs),
            "seconds": time.perf_counter() - started}


def _random_row(name, unit, fraction, full, docs, queries, qrels) -> dict:
    runs = [_row(name, unit, "random", fraction, full, docs, queries, qrels, _random(seed)) for seed in range(RANDOM_SEEDS)]
    scores = [r["ndcg"] for r in runs]
    return {**runs[0], "ndcg": float(np.mean(scores)), "spread": float(np.std(scores)),
            "words_pruned": float(np.mean([r["words_pruned"] for r in runs])),
            "documents_left": float(np.mean([r["documents_left"] for r in runs]))}


def run(args) -> dict:
    from salience.data.scorers import STATISTICS

    result = {"dev": [], "test": [], "chosen": None}
    loaded = {(name, split): search_set(SHARED_DATA / "search" / name, split) for name in SETS for split in ("dev", "test")}
    fulls = {key: _ndcg(_pruned(docs, "document", None, 0)[0], queries, qrels)
             for key, (docs, queries, qrels) in loaded.items()}
    for unit in UNITS:
        for name in SETS:
            docs, queries, qrels = loaded[(name, "dev")]
            full = fulls[(name, "dev")]
            for stat in STATISTICS:
                result["dev"].append(_row(name, unit, stat, 0.25, full, docs, queries, qrels, _statistic(stat)))
            result["dev"].append(_random_row(name, unit, 0.25, full, docs, queries, qrels))
        print(f"dev: {unit} done", file=sys.stderr, flush=True)
    worst = {}
    for r in result["dev"]:
        if r["by"] != "random":
            key = (r["unit"], r["by"])
            worst[key] = min(worst.get(key, np.inf), r["ndcg"] - r["full"])
    unit, stat = args.choice.split(":") if args.choice else max(worst, key=worst.get)
    result["chosen"] = {"unit": unit, "by": stat, "worse_dev_change": worst[(unit, stat)]}
    for name in SETS:
        docs, queries, qrels = loaded[(name, "test")]
        full = fulls[(name, "test")]
        for fraction in FRACTIONS:
            result["test"].append(_row(name, unit, stat, fraction, full, docs, queries, qrels, _statistic(stat)))
            result["test"].append(_random_row(name, unit, fraction, full, docs, queries, qrels))
        print(f"test: {name} done", file=sys.stderr, flush=True)
    return result


def _line(r, with_verdict: bool) -> str:
    spread = f" ± {r['spread']:.4f}" if "spread" in r else ""
    cells = [r["set"], r["unit"], r["by"]] + ([f"{r['fraction']:.0%}"] if with_verdict else [])
    cells += [f"{r['full']:.4f}", f"{r['ndcg']:.4f}{spread}", f"{r['ndcg'] - r['full']:+.4f}", f"{r['words_pruned']:.1%}",
              f"{r['documents'] - r['documents_left']:,.0f} of {r['documents']:,}"]
    if with_verdict:
        cells.append("yes" if r["ndcg"] >= r["full"] - 0.005 else "no")
    return "| " + " | ".join(cells) + " |"


def render(result: dict, command: str, seconds: float) -> str:
    chosen = result["chosen"]
    lines = ["## Static passage pruning: BM25 with the lowest-scored passages deleted, against random", "",
             f"`{command}` ({seconds / 60:.0f} minutes, 2 cores). nDCG@10 of the full index and of the pruned one; "
             "random: mean ± sd over 5 seeds, the same unit. A unit is a whole document (`Index.prune`), a sentence, "
             "or sentences packed up to 50 words (`prune_passages`); a pruned document keeps the rest of its text "
             "and leaves the corpus only when no passage of it is left. words pruned: the share of the corpus's "
             "words deleted.", "",
             f"**Choice on the {split_heading('dev')}** (every unit and text statistic at 25% of the unit; chosen: "
             f"the pair whose worse set loses least, **{chosen['unit']} by {chosen['by']}**, "
             f"{chosen['worse_dev_change']:+.4f}):", "",
             "| set | unit | pruned by (lowest first) | full | pruned | change | words pruned | documents removed |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    lines += [_line(r, False) for r in result["dev"]]
    lines += ["", f"**Judged on the {split_heading('test')}** (the unit and statistic chosen on dev):", "",
              "| set | unit | pruned by | share pruned | full | pruned | change | words pruned | documents removed | "
              "within 0.005 |", "|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    lines += [_line(r, True) for r in result["test"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--choice", help="UNIT:STATISTIC to judge on test instead of the dev split's choice")
    return run_benchmark("prune.py", parser, run, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
