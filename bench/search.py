"""Side-by-side BM25 benchmark: salience vs bm25s (numpy and numba backends), rank_bm25, tantivy.

One process run, same data, same machine. For each collection in ../shared/data/search:
nDCG@10 and recall@100 (salience.evaluate, trec_eval semantics, the same code for every
system), index seconds (tokenizing included), single-thread queries/second at k=10 with query
tokenizing included and excluded, and peak traced memory of index + one query pass.

Timings are the best of --repeats runs (this machine is shared and noisy); a query pass is
repeated within each run to last about 0.25 s; ratios are taken within the one run. Usage:

    python bench/search.py --write BENCHMARKS.md
    python bench/search.py --datasets scifact --repeats 1 --skip rank_bm25
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import re
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))
from common import search_set, split_heading, write_section  # noqa: E402

from salience import Run, evaluate  # noqa: E402
from salience.search import BM25  # noqa: E402
from salience.text import Tokenizer  # noqa: E402

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "search"


def best_time(fn, repeats: int):
    best, result = float("inf"), None
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def best_call_time(fn, repeats: int, min_seconds: float = 0.25) -> float:
    """Seconds of one call of ``fn``: each of ``repeats`` rounds calls it enough times to last
    about ``min_seconds`` (as timeit's autorange), and the best round's mean is kept. A pass over
    a small query set takes under a millisecond, too short to time once."""
    gc.collect()
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    number = max(1, int(min_seconds / max(first, 1e-6)))
    best = first
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return best


def peak_mb(fn) -> float:
    gc.collect()
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


# ----------------------------------------------------------------------------------------
# systems: index(corpus) -> engine; search(engine, queries, k) -> list[list[doc_id]] with scores;
# prepare(engine, queries) -> pre-tokenized; search_prepared(engine, prepared, k)
class Salience:
    def __init__(self, backend: str):
        self.backend = backend
        self.name = "salience" if backend == "auto" else f"salience ({backend})"

    def index(self, corpus):
        return BM25(backend=self.backend).index(corpus)

    def search(self, engine, queries, k):
        return [s.to_dict() for s in engine.search_batch(queries, k=k)]

    def timed_search(self, engine, queries, k):
        return engine.search_batch(queries, k=k)

    def prepare(self, engine, queries):
        return engine._encode_queries(queries)

    def search_prepared(self, engine, prepared, k):
        return engine._search_encoded(prepared, k, None)

    def warm(self, engine):
        engine.search_batch(["warm up"], k=10)


class BM25S:
    def __init__(self, backend: str):
        import bm25s
        import Stemmer

        self.bm25s, self.stemmer = bm25s, Stemmer.Stemmer("english")
        self.backend = backend
        self.name = f"bm25s ({backend})"

    def _tokenize(self, texts):
        return self.bm25s.tokenize(texts, stopwords="en", stemmer=self.stemmer, show_progress=False)

    def index(self, corpus):
        texts = [d.get("title", "") + " " + d.get("text", "") for d in corpus]
        engine = self.bm25s.BM25(k1=1.5, b=0.75, method="lucene", backend=self.backend)
        engine.index(self._tokenize(texts), show_progress=False)
        engine.doc_ids = np.array([d["_id"] for d in corpus], dtype=object)
        return engine

    def search(self, engine, queries, k):
        docs, scores = engine.retrieve(self._tokenize(queries), k=k, show_progress=False, n_threads=1)
        return [dict(zip(engine.doc_ids[row].tolist(), s.tolist())) for row, s in zip(docs, scores)]

    # timed searches return bm25s' own document ids (corpus=doc_ids), as salience returns its ids:
    # both columns then measure the same work
    def timed_search(self, engine, queries, k):
        return engine.retrieve(self._tokenize(queries), corpus=engine.doc_ids, k=k, show_progress=False, n_threads=1)

    def prepare(self, engine, queries):
        return self._tokenize(queries)

    def search_prepared(self, engine, prepared, k):
        return engine.retrieve(prepared, corpus=engine.doc_ids, k=k, show_progress=False, n_threads=1)

    def warm(self, engine):
        engine.retrieve(self._tokenize(["warm up heat"]), k=1, show_progress=False, n_threads=1)


class RankBM25:
    """rank_bm25's BM25Okapi, fed the salience tokenizer's terms (it has no tokenizer)."""

    name = "rank_bm25 (Okapi)"
    repeats = 1  # about 40 queries/s: one pass is enough

    def __init__(self):
        import rank_bm25

        self.rank_bm25 = rank_bm25
        self.tokenizer = Tokenizer()

    def index(self, corpus):
        tokens = self.tokenizer.tokenize_batch([d.get("title", "") + " " + d.get("text", "") for d in corpus])
        engine = self.rank_bm25.BM25Okapi(tokens, k1=1.5, b=0.75)
        engine.doc_ids = [d["_id"] for d in corpus]
        return engine

    def _top(self, engine, tokens, k):
        scores = engine.get_scores(tokens)
        top = np.argsort(-scores, kind="stable")[:k]
        return {engine.doc_ids[i]: float(scores[i]) for i in top if scores[i] > 0}

    def search(self, engine, queries, k):
        return [self._top(engine, self.tokenizer.tokenize(q), k) for q in queries]

    timed_search = search

    def prepare(self, engine, queries):
        return [self.tokenizer.tokenize(q) for q in queries]

    def search_prepared(self, engine, prepared, k):
        return [self._top(engine, t, k) for t in prepared]

    def warm(self, engine):
        pass


class Tantivy:
    """tantivy-py (Rust): en_stem analyzer (lower-case, Snowball English, no stop words), BM25 k1=1.2 b=0.75."""

    name = "tantivy"
    _unsafe = re.compile(r"[^\w\s]", re.UNICODE)

    def __init__(self):
        import tantivy

        self.tantivy = tantivy

    def index(self, corpus):
        tv = self.tantivy
        builder = tv.SchemaBuilder()
        builder.add_text_field("id", stored=True, tokenizer_name="raw")
        builder.add_text_field("title", stored=False, tokenizer_name="en_stem")
        builder.add_text_field("text", stored=False, tokenizer_name="en_stem")
        index = tv.Index(builder.build())
        writer = index.writer(heap_size=200_000_000, num_threads=1)
        for d in corpus:
            writer.add_document(tv.Document(id=d["_id"], title=d.get("title", ""), text=d.get("text", "")))
        writer.commit()
        writer.wait_merging_threads()
        index.reload()
        return index

    def search(self, engine, queries, k):
        searcher = engine.searcher()
        out = []
        for q in queries:
            clean = self._unsafe.sub(" ", q).strip()
            if not clean:
                out.append({})
                continue
            hits = searcher.search(engine.parse_query(clean, ["title", "text"]), k).hits
            out.append({searcher.doc(addr)["id"][0]: score for score, addr in hits})
        return out

    timed_search = search
    prepare = None

    def warm(self, engine):
        self.search(engine, ["warm up"], 1)


def make_systems(skip: set[str]):
    systems = [Salience("auto"), Salience("numpy")]
    for factory, key in ((lambda: BM25S("numpy"), "bm25s"), (lambda: BM25S("numba"), "bm25s-numba"), (RankBM25, "rank_bm25"), (Tantivy, "tantivy")):
        if key in skip:
            continue
        try:
            systems.append(factory())
        except ImportError as err:
            print(f"skipping {key}: {err}", file=sys.stderr)
    return systems


def run_dataset(root: Path, systems, repeats: int) -> list[dict]:
    """Every system on the judged queries of the set's test split (nothing here is tuned, but
    every shared set's targets are reported on test)."""
    corpus, queries, qrels = search_set(root, "test")
    ids, texts = list(queries), list(queries.values())
    rows = []
    for system in systems:
        reps = getattr(system, "repeats", repeats)
        index_seconds, engine = best_time(lambda: system.index(corpus), reps)
        system.warm(engine)
        run10 = Run(dict(zip(ids, system.search(engine, texts, 10))))
        run100 = Run(dict(zip(ids, system.search(engine, texts, 100))))
        ndcg = evaluate(qrels, run10, "ndcg@10")["ndcg@10"]
        recall = evaluate(qrels, run100, "recall@100")["recall@100"]
        incl = best_call_time(lambda: system.timed_search(engine, texts, 10), reps)
        excl = None
        if system.prepare is not None:
            prepared = system.prepare(engine, texts)
            excl = best_call_time(lambda: system.search_prepared(engine, prepared, 10), reps)
        # peak memory of indexing plus one pass over (at most 50) queries
        memory = peak_mb(lambda: system.timed_search(system.index(corpus), texts[:50], 10))
        rows.append(
            {
                "system": system.name,
                "ndcg@10": ndcg,
                "recall@100": recall,
                "index_s": index_seconds,
                "qps_incl": len(texts) / incl,
                "qps_excl": len(texts) / excl if excl else None,
                "peak_mb": memory,
                "n_queries": len(texts),
            }
        )
        print(f"  {root.name:<10} {system.name:<20} nDCG@10 {ndcg:.4f}  R@100 {recall:.4f}  index {index_seconds:.3f}s  "
              f"q/s {len(texts) / incl:,.0f}", file=sys.stderr, flush=True)
        del engine
    return rows


def fmt(value, spec):
    return "n/a" if value is None else format(value, spec)


def render(results: dict[str, list[dict]], command: str) -> str:
    lines = [
        "## BM25 search (`bench/search.py`)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {platform.machine()}, {platform.python_implementation()} {platform.python_version()}, "
        "2 cores shared with other work; timings are the best of the repeats (a pass over the queries is repeated "
        "within each to last about 0.25 s, its mean kept), single-threaded "
        "(bm25s `n_threads=1`, tantivy writer `num_threads=1`). Lucene BM25 k1=1.5 b=0.75 for salience, "
        "bm25s and rank_bm25's Okapi (its only variant of the family; Robertson IDF with a floor); tantivy uses its own "
        "analyzer (no stop words) and k1=1.2. q/s incl. = query tokenizing included; excl. = queries passed as "
        "token ids. Every timed search returns document ids: salience `Scores` with its ids, bm25s its documents array "
        "(`corpus=doc_ids`), so both columns measure the same work. Peak memory is the "
        "tracemalloc peak of indexing plus a pass over 50 queries (Python and numpy allocations; tantivy's Rust heap and "
        "numba's are not traced).",
        "",
    ]
    for dataset, rows in results.items():
        lines += [
            f"### {dataset}, {split_heading('test')} ({rows[0]['n_queries']} judged queries)",
            "",
            "| system | nDCG@10 | recall@100 | index s | q/s incl. | q/s excl. | peak MB |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in rows:
            lines.append(
                f"| {r['system']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | {r['index_s']:.3f} | "
                f"{r['qps_incl']:,.0f} | {fmt(r['qps_excl'], ',.0f')} | {fmt(r['peak_mb'], '.1f')} |"
            )
        ours = rows[0]
        lines += ["", f"Ratios of **{ours['system']}** to each system (index: lower is better; q/s: higher is better):", "",
                  "| vs | index time | q/s incl. | q/s excl. | nDCG@10 difference |", "|---|---:|---:|---:|---:|"]
        for r in rows[1:]:
            excl = ours["qps_excl"] / r["qps_excl"] if ours["qps_excl"] and r["qps_excl"] else None
            lines.append(
                f"| {r['system']} | {ours['index_s'] / r['index_s']:.2f}x | {ours['qps_incl'] / r['qps_incl']:.2f}x | "
                f"{fmt(excl, '.2f')}{'x' if excl else ''} | {ours['ndcg@10'] - r['ndcg@10']:+.4f} |"
            )
        lines.append("")
    lines += targets(results)
    return "\n".join(lines) + "\n"


def targets(results) -> list[str]:
    """The issue's targets, checked against bm25s in this run."""
    out = [f"### Targets (issue 2), measured in this run on the {split_heading('test')}s", "",
           "| dataset | target | measured | met |", "|---|---|---|---|"]
    for dataset, rows in results.items():
        by = {r["system"]: r for r in rows}
        ours, ref, ref_numba = by.get("salience"), by.get("bm25s (numpy)"), by.get("bm25s (numba)")
        if not (ours and ref):
            continue
        diffs = [ours["ndcg@10"] - r["ndcg@10"] for r in (ref, ref_numba) if r]
        shown = " / ".join(f"{r['ndcg@10']:.4f}" for r in (ref, ref_numba) if r)
        met = "yes" if min(abs(d) for d in diffs) <= 1e-4 else "no"
        if met == "yes" and abs(diffs[0]) > 1e-4:
            met += " (equals bm25s numba; bm25s numpy breaks a tie at rank 10 the other way)"
        out.append(f"| {dataset} | nDCG@10 equal to bm25s (+-1e-4) | {ours['ndcg@10']:.4f} vs {shown} (numpy / numba) | {met} |")
        for kind in ("incl", "excl"):
            ratio = ours[f"qps_{kind}"] / ref[f"qps_{kind}"]
            out.append(f"| {dataset} | q/s ({kind}.) >= 3x bm25s numpy | {ratio:.2f}x | {'yes' if ratio >= 3 else 'no'} |")
            if ref_numba:
                ratio = ours[f"qps_{kind}"] / ref_numba[f"qps_{kind}"]
                out.append(f"| {dataset} | q/s ({kind}.) >= bm25s numba | {ratio:.2f}x | {'yes' if ratio >= 1 else 'no'} |")
        ratio = ours["index_s"] / ref["index_s"]
        out.append(f"| {dataset} | index time <= 0.5x bm25s | {ratio:.2f}x | {'yes' if ratio <= 0.5 else 'no'} |")
    return out + [""]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--datasets", default="scifact,npl,cranfield")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip", default="", help="comma-separated: bm25s, bm25s-numba, rank_bm25, tantivy")
    parser.add_argument("--write", type=Path, default=None, help="update this markdown file's search section")
    parser.add_argument("--json", type=Path, default=None, help="also write raw numbers as JSON")
    args = parser.parse_args(argv)
    systems = make_systems({s.strip() for s in args.skip.split(",") if s.strip()})
    results = {}
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        root = args.data / name
        if not root.is_dir():
            print(f"missing dataset folder {root}", file=sys.stderr)
            return 2
        results[name] = run_dataset(root, systems, args.repeats)
    command = "python bench/search.py " + " ".join(argv if argv is not None else sys.argv[1:])
    section = render(results, command.strip())
    print(section)
    if args.write:
        write_section(args.write, section)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
