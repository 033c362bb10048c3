"""Scale benchmark: BM25 (salience against bm25s) and dense indexes grown over a synthetic
corpus, in one process run.

The corpus is drawn from ``../shared/data/dsir/raw_docs.jsonl.gz``: its words (lower-cased
``\\w+`` runs) with their frequencies, and its documents' lengths in words; document i has a
length drawn from those lengths and words drawn from that unigram distribution (seeded, so
every size is a prefix of the next). Queries: 500 of three words each, drawn from the same
distribution less its 200 most frequent words.

At each size: index time (wall), bytes per document of the saved index (the folder's files),
queries/s (k=10, one thread each: salience ``search_batch(n_jobs=1)``, bm25s
``retrieve(n_threads=1)``; queries tokenized inside the timing for both; bm25s tokenizes with
its streaming ``Tokenizer``, English stop words and stemmer), and the overlap of
the two engines' top 10. salience also indexes with its shards tokenized (dense: encoded) by 2
worker processes (``n_jobs=2``) and, at the smallest size, by 2 Ray tasks (``executor="ray"``),
each checked to return exactly the one-process results; in 2 and 4 shards (built by 2
processes, searched by scatter-gather with global statistics; at the Ray sizes also built by
Ray tasks and held by Ray actors), checked to return the same top 10; and tantivy (Rust,
Lucene-style segments) beside bm25s. Dense (all-MiniLM-L6-v2, ONNX Runtime) is grown as far
as ``--dense-max`` allows: its encoding, at a few hundred documents per second on 2 cores, is
what bounds it.

    python bench/scale.py --write BENCHMARKS.md
    python bench/scale.py --sizes 10000,100000

Each engine runs in a process of its own over a corpus file written once (held in one process,
the corpus and both engines' indexes outgrew a 23 GB machine at 10^6 documents).

MiniLM at 10^6 documents is hours of encoding on 2 cores; on a machine with a GPU (no
``../shared`` there: carry the source statistics, ``--save-source-stats``), MiniLM is run on the
GPU, each size's documents generated in the process (no corpus file), exact search on 2 CPU
threads (set ``OMP_NUM_THREADS=2`` and friends):

    python bench/scale.py --save-source-stats stats.npz
    python bench/scale.py --gpu-dense 10000,100000,1000000 --source-stats stats.npz --rows-file rows_gpu.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from salience.search import BM25  # noqa: E402

RAW = ROOT.parent / "shared" / "data" / "dsir" / "raw_docs.jsonl.gz"
WORD = re.compile(r"\w+")
#: the source statistics read from a file (--source-stats) instead of RAW, on a machine without ../shared
SOURCE_STATS: Path | None = None


def source_statistics():
    if SOURCE_STATS is not None:
        saved = np.load(SOURCE_STATS, allow_pickle=False)
        return saved["vocabulary"].astype(object), saved["probabilities"], saved["lengths"]
    counts, lengths = Counter(), []
    with gzip.open(RAW, "rt", encoding="utf-8") as fh:
        for line in fh:
            words = WORD.findall(json.loads(line)["text"].lower())
            counts.update(words)
            lengths.append(len(words))
    vocabulary = np.array([w for w, _ in counts.most_common()], dtype=object)
    frequency = np.array([c for _, c in counts.most_common()], dtype=np.float64)
    lengths = np.array([n for n in lengths if n > 0])
    return vocabulary, frequency / frequency.sum(), lengths


def synthetic_corpus(n: int, vocabulary, probabilities, lengths, seed: int = 0):
    """``n`` documents (id, text), generated in chunks: the first m of size n are those of size m."""
    rng = np.random.default_rng(seed)
    cumulative = np.cumsum(probabilities)
    chunk = 10_000
    for lo in range(0, n, chunk):
        sizes = rng.choice(lengths, min(chunk, n - lo))
        words = np.searchsorted(cumulative, rng.random(int(sizes.sum())) * cumulative[-1]).clip(0, len(vocabulary) - 1)
        tokens = vocabulary[words].tolist()
        ends = np.cumsum(sizes).tolist()
        start = 0
        for i, end in enumerate(ends):
            yield f"d{lo + i}", " ".join(tokens[start:end])
            start = end


def synthetic_queries(vocabulary, probabilities, n: int = 500, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    p = probabilities[200:] / probabilities[200:].sum()
    return [" ".join(rng.choice(vocabulary[200:], 3, p=p)) for _ in range(n)]


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def latency_ms(search, queries) -> tuple[float, float]:
    """p50 and p99 of one query at a time (k=10), in milliseconds."""
    times = []
    for q in queries:
        start = time.perf_counter()
        search(q)
        times.append((time.perf_counter() - start) * 1000)
    return float(np.percentile(times, 50)), float(np.percentile(times, 99))


def best_qps(run_batch, n_queries: int, repeats: int = 3):
    """queries/s of the best of ``repeats`` runs of the whole batch (every engine alike: one
    batch takes a fraction of a second on a machine shared with other work) and its results."""
    best = 0.0
    for _ in range(repeats):
        start = time.perf_counter()
        results = run_batch()
        best = max(best, n_queries / (time.perf_counter() - start))
    return best, results


def measured_search(engine, queries) -> dict:
    """queries/s of the whole batch (one thread), latency of one query at a time, the top 10s."""
    engine.search_batch(queries[:5], k=10)
    qps, results = best_qps(lambda: engine.search_batch(queries, k=10), len(queries))
    p50, p99 = latency_ms(lambda q: engine.search(q, k=10), queries)
    return {"qps": qps, "p50_ms": p50, "p99_ms": p99, "top": [r.ids for r in results],
            "scores": [r.values.tolist() for r in results]}


def salience_bulk(docs, queries, work: Path, memory_mb: float = 1024):
    """salience BM25 built in bounded memory (``BM25.build``: runs flushed at the memory budget,
    merged on disk) from a stream of the corpus file, then searched memory-mapped."""
    folder = work / "salience-bulk"
    start = time.perf_counter()
    engine = BM25(fields=("text",), store_documents=False).build(({"id": i, "text": t} for i, t in docs()), folder,
                                                                  memory_mb=memory_mb)
    index_s = time.perf_counter() - start
    build_rss = rss_mb()
    size = folder_bytes(folder)
    del engine
    import gc

    gc.collect()
    start = time.perf_counter()
    engine = BM25.load(folder, verify=False)  # opened as a search process would: memory-mapped
    open_s = time.perf_counter() - start
    found = measured_search(engine, queries)
    return {"index_s": index_s, "bytes": size, "build_rss_mb": build_rss, "open_s": open_s,
            "search_rss_mb": current_rss_mb(), **found}


def current_rss_mb() -> float:
    """Resident memory now (not the peak), from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def salience_bm25(docs, queries, work: Path, n_jobs: int = 1, executor: str = "local"):
    records = [{"id": i, "text": t} for i, t in docs]
    start = time.perf_counter()
    engine = BM25(fields=("text",), store_documents=False).index(records, n_jobs=n_jobs, executor=executor)
    index_s = time.perf_counter() - start
    del records
    folder = work / f"salience-{n_jobs}-{executor}"
    engine.save(folder)
    size = folder_bytes(folder)
    shutil.rmtree(folder)
    return {"index_s": index_s, "bytes": size, **measured_search(engine, queries)}


def sharded_bm25(docs, queries, work: Path, n_shards: int, executor: str = "local"):
    """salience BM25 in ``n_shards`` shards: routed by id hash, built by 2 processes (or 2
    Ray tasks), loaded memory-mapped in this process (or into one Ray actor each) and searched
    by scatter-gather with global statistics."""
    from salience.search.shards import ShardedIndex

    records = ({"id": i, "text": t} for i, t in docs())  # streamed from the corpus file
    folder = work / f"sharded-{n_shards}-{executor}"
    start = time.perf_counter()
    ShardedIndex.build(records, n_shards=n_shards, out=folder, n_jobs=2, executor=executor, fields=("text",),
                       store_documents=False)
    index_s = time.perf_counter() - start
    del records
    size = folder_bytes(folder)
    engine = ShardedIndex.load(folder, executor=executor)
    return {"index_s": index_s, "bytes": size, **measured_search(engine, queries)}


def tantivy_index(docs, queries, work: Path, query_sets: dict | None = None):
    """tantivy-py (Rust, Lucene-style segments): en_stem analyzer, its BM25 (k1=1.2, b=0.75),
    the writer's own threads (its best on this machine) and a 500 MB indexing heap, on disk.
    With ``query_sets`` ({name: queries}) each set's queries/s too."""
    import tantivy

    start = time.perf_counter()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    builder.add_text_field("text", stored=False, tokenizer_name="en_stem")
    folder = work / "tantivy"
    folder.mkdir()
    index = tantivy.Index(builder.build(), path=str(folder))
    writer = index.writer(heap_size=500_000_000)
    for doc_id, text in docs():
        writer.add_document(tantivy.Document(id=str(doc_id), text=text))
    writer.commit()
    writer.wait_merging_threads()
    index.reload()
    index_s = time.perf_counter() - start
    size = folder_bytes(folder)
    searcher = index.searcher()
    unsafe = re.compile(r"[^\w\s]")

    def search(q):
        hits = searcher.search(index.parse_query(unsafe.sub(" ", q), ["text"]), 10).hits
        return [searcher.doc(addr)["id"][0] for _, addr in hits]

    for q in queries[:5]:
        search(q)
    qps, top = best_qps(lambda: [search(q) for q in queries], len(queries))
    p50, p99 = latency_ms(search, queries)
    by_set = {name: best_qps(lambda: [search(q) for q in some], len(some))[0] for name, some in (query_sets or {}).items()}
    return {"index_s": index_s, "bytes": size, "qps": qps, "p50_ms": p50, "p99_ms": p99, "top": top, "qps_by_set": by_set}


def bm25s_index(docs, queries, work: Path, backend: str = "numpy", query_sets: dict | None = None):
    """bm25s (``backend``: its default numpy scoring or its numba backend, its best for speed) fed through its streaming ``Tokenizer`` a chunk at a time, each document's ids kept
    as a numpy array: its one-shot ``bm25s.tokenize`` holds every token as a Python int, more
    memory than this machine has at 10^6 documents."""
    import bm25s
    import Stemmer
    from bm25s.tokenization import Tokenizer

    start = time.perf_counter()
    tokenizer = Tokenizer(stopwords="en", stemmer=Stemmer.Stemmer("english"))
    ids = []
    for lo in range(0, len(docs), 20_000):
        chunk = tokenizer.tokenize([t for _, t in docs[lo : lo + 20_000]], update_vocab=True, return_as="ids",
                                   show_progress=False)
        ids.extend(np.asarray(row, dtype=np.int32) for row in chunk)
    engine = bm25s.BM25(k1=1.5, b=0.75, method="lucene", backend=backend)
    engine.index((ids, tokenizer.get_vocab_dict()), show_progress=False)
    index_s = time.perf_counter() - start
    del ids
    doc_ids = np.array([i for i, _ in docs], dtype=object)
    folder = work / f"bm25s-{backend}"
    engine.save(str(folder))
    size = folder_bytes(folder)
    shutil.rmtree(folder)

    def tokenized(texts):
        return tokenizer.tokenize(texts, update_vocab=False, return_as="ids", show_progress=False)

    engine.retrieve(tokenized(queries[:5]), k=10, show_progress=False, n_threads=1)
    qps, (found, _) = best_qps(lambda: engine.retrieve(tokenized(queries), corpus=doc_ids, k=10, show_progress=False,
                                                       n_threads=1), len(queries))
    p50, p99 = latency_ms(lambda q: engine.retrieve(tokenized([q]), k=10, show_progress=False, n_threads=1), queries)
    by_set = {name: best_qps(lambda: engine.retrieve(tokenized(some), corpus=doc_ids, k=10, show_progress=False,
                                                     n_threads=1), len(some))[0]
              for name, some in (query_sets or {}).items()}  # each named set's queries/s (query_sets: {name: queries})
    return {"index_s": index_s, "bytes": size, "qps": qps, "p50_ms": p50, "p99_ms": p99,
            "top": [list(row) for row in found], "qps_by_set": by_set}


def dense_index(docs, queries, work: Path, n_jobs: int = 1, encoder: str | None = None, device: str = "cpu",
                dtype: str = "float32", model: str | None = None):
    """salience Dense: MiniLM (``encoder`` None; on ``device`` in ``dtype``) or a static encoder
    folder; exact search, and for a static encoder also HNSW and IVF-PQ over the same vectors
    (their build time, queries/s, recall@10 against exact and bytes per vector of the structure)."""
    from salience.search import Dense

    options = {"device": device, "dtype": dtype, **({"encoder": model} if model else {})} if encoder is None else \
        {"encoder": encoder}
    if device != "cpu":
        options["batch_tokens"] = GPU_BATCH_TOKENS
    start = time.perf_counter()
    engine = Dense(fields=("text",), store_documents=False, **options).index(
        ({"id": i, "text": t} for i, t in docs()) if callable(docs) else [{"id": i, "text": t} for i, t in docs],
        n_jobs=n_jobs)
    index_s = time.perf_counter() - start
    folder = work / "dense"
    engine.save(folder)
    size = folder_bytes(folder)
    shutil.rmtree(folder)
    result = {"index_s": index_s, "bytes": size, **measured_search(engine, queries)}
    if encoder is not None:
        exact = result["top"]
        for kind in ("hnsw", "ivfpq"):
            if kind == "hnsw" and len(engine) > HNSW_MAX:
                continue  # its build is what a run of this length cannot afford beyond --hnsw-max
            engine.approximate, engine._graph = kind, None
            start = time.perf_counter()
            structure = engine._hnsw()
            build_s = time.perf_counter() - start
            import faiss

            found = measured_search(engine, queries)
            result[kind] = {"build_s": build_s, "qps": found["qps"], "p50_ms": found["p50_ms"],
                            "p99_ms": found["p99_ms"], "recall": overlap(exact, found["top"]),
                            "bytes_per_vector": len(faiss.serialize_index(structure)) / len(engine)}
            print(f"    {kind}: {result[kind]}", file=sys.stderr, flush=True)
            engine._graph = None
    return result


def overlap(a: list[list], b: list[list]) -> float:
    return float(np.mean([len(set(x) & set(y)) / max(len(x), 1) for x, y in zip(a, b)]))


ENGINES = {"salience": lambda docs, queries, work: salience_bm25(docs, queries, work),
           "salience_2": lambda docs, queries, work: salience_bm25(docs, queries, work, n_jobs=2),
           "salience_ray": lambda docs, queries, work: _with_ray(lambda: salience_bm25(docs, queries, work, n_jobs=2,
                                                                                       executor="ray")),
           "sharded_2": lambda docs, queries, work: sharded_bm25(docs, queries, work, 2),
           "sharded_4": lambda docs, queries, work: sharded_bm25(docs, queries, work, 4),
           "sharded_2_ray": lambda docs, queries, work: _with_ray(lambda: sharded_bm25(docs, queries, work, 2, "ray")),
           "salience_bulk": salience_bulk,
           "tantivy": tantivy_index,
           "bm25s": bm25s_index,
           "bm25s_numba": lambda docs, queries, work: bm25s_index(docs, queries, work, backend="numba"),
           "dense": lambda docs, queries, work: dense_index(docs, queries, work),
           "dense_static": lambda docs, queries, work: dense_index(docs, queries, work, encoder=STATIC_ENCODER),
           "dense_2": lambda docs, queries, work: dense_index(docs, queries, work, n_jobs=2)}


def _with_ray(fn):
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        return fn()
    finally:
        ray.shutdown()


#: engines that read the corpus file as a stream (the others are given it as a list in memory)
STREAMING = {"salience_bulk", "tantivy", "sharded_2", "sharded_4", "sharded_2_ray", "dense_static"}
#: the static encoder folder the dense_static engine uses (distilled once per run)
STATIC_ENCODER: str | None = None
#: padded tokens per encoder batch on a GPU (512 windows of 256: the CPU default, 8192, starves a GPU)
GPU_BATCH_TOKENS = 131072
#: the largest collection an HNSW graph is built over (--hnsw-max)
HNSW_MAX = 10**12


def read_corpus(corpus: Path, n: int):
    """The first ``n`` documents of the corpus file, (id, text) one at a time."""
    with (gzip.open(corpus, "rt", encoding="utf-8") if corpus.suffix == ".gz" else open(corpus, encoding="utf-8")) as fh:
        for i, line in enumerate(fh):
            if i == n:
                break
            record = json.loads(line)
            yield record["id"], record["text"]


def run_engine(engine: str, corpus: Path, n: int, queries: Path, out: Path, memory_mb: float = 1024) -> None:
    """One engine over the first ``n`` documents of a corpus file, in a process of its own (so
    that no engine's memory adds to another's); its result as JSON."""
    docs = (lambda: read_corpus(corpus, n)) if engine in STREAMING else list(read_corpus(corpus, n))
    with tempfile.TemporaryDirectory(dir=corpus.parent) as tmp:
        if engine == "salience_bulk":
            result = salience_bulk(docs, json.loads(queries.read_text()), Path(tmp), memory_mb)
        else:
            result = ENGINES[engine](docs, json.loads(queries.read_text()), Path(tmp))
    result["rss_mb"] = rss_mb()
    out.write_text(json.dumps(result, default=str))


def run_gpu_dense(sizes: list[int], dtype: str, rows_file: Path | None, model: str | None = None,
                  device: str = "cuda") -> list[dict]:
    """MiniLM on a GPU at each size, the documents generated in this process (a 10^6 corpus file
    would take minutes to write and read on a machine lent for minutes); exact search on the CPU."""
    import torch

    vocabulary, probabilities, lengths = source_statistics()
    queries = synthetic_queries(vocabulary, probabilities)
    where = torch.cuda.get_device_name(0) if device.startswith("cuda") else "the CPU"
    name = f"salience Dense (MiniLM on {where}, {dtype}; search on 2 CPU threads)"
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            started = time.perf_counter()
            docs = list(synthetic_corpus(n, vocabulary, probabilities, lengths))
            generated_s = time.perf_counter() - started
            result = dense_index(docs, queries, Path(tmp), device=device, dtype=dtype, model=model)
            result.update(rss_mb=rss_mb(), generated_s=generated_s, name=name,
                          gpu_peak_mb=torch.cuda.max_memory_allocated() / 2**20 if device != "cpu" else 0.0)
            rows.append({"n": n, "words": sum(t.count(" ") + 1 for _, t in docs), "dense_gpu": result})
            del docs
            print(f"  {n:>10,} dense on the GPU: index {result['index_s']:.1f} s, {result['qps']:.0f} q/s, "
                  f"p50 {result['p50_ms']:.1f} ms, RSS {result['rss_mb']:,.0f} MB", file=sys.stderr, flush=True)
            keep_rows(rows_file, rows)
    return rows


def engines_for(n: int, limits: dict) -> list[str]:
    """The engines run at ``n`` documents: each as far as its limit (``--*-max``) allows."""
    order = ["salience", "salience_2", "salience_ray", "salience_bulk", "sharded_2", "sharded_4", "sharded_2_ray",
             "tantivy", "bm25s_numba", "bm25s", "dense", "dense_2", "dense_static"]
    return [engine for engine in order if n <= limits.get(engine, 10**12)]


def run(sizes: list[int], limits: dict, memory_mb: float, rows_file: Path | None, hnsw_max: int = 10**12) -> list[dict]:
    import subprocess

    vocabulary, probabilities, lengths = source_statistics()
    print(f"  source: {len(vocabulary):,} words, mean length {lengths.mean():.0f}", file=sys.stderr, flush=True)
    rows = []
    # beside the repository's parent, not /tmp: a 10^7 corpus and its indexes need tens of GB
    with tempfile.TemporaryDirectory(dir=ROOT.parent) as tmp:
        work = Path(tmp)
        big = max(sizes) > 1_000_000  # gzip the corpus file (a 10^7 corpus is 20 GB as text)
        corpus_file, queries_file = work / ("corpus.jsonl.gz" if big else "corpus.jsonl"), work / "queries.json"
        queries_file.write_text(json.dumps(synthetic_queries(vocabulary, probabilities)))
        words = {}
        opener = (lambda: gzip.open(corpus_file, "wt", encoding="utf-8", compresslevel=1)) if big else (
            lambda: open(corpus_file, "w", encoding="utf-8"))
        started = time.perf_counter()
        with opener() as fh:
            total = 0
            for i, (doc_id, text) in enumerate(synthetic_corpus(max(sizes), vocabulary, probabilities, lengths)):
                fh.write(json.dumps({"id": doc_id, "text": text}) + "\n")
                total += text.count(" ") + 1
                if i + 1 in sizes:
                    words[i + 1] = total
        print(f"  corpus of {max(sizes):,} documents written in {time.perf_counter() - started:.0f} s",
              file=sys.stderr, flush=True)
        static = work / "static-minilm"
        if any("dense_static" in engines_for(n, limits) for n in sizes):
            from salience.models.distill import distill

            started = time.perf_counter()
            distill(out=static)  # the plain recipe: every vocabulary token, PCA 256, SIF
            print(f"  static encoder distilled in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        for n in sizes:
            row = {"n": n, "words": words[n]}
            for engine in engines_for(n, limits):
                out = work / f"{engine}-{n}.json"
                command = [sys.executable, __file__, "--run-engine", engine, "--corpus", str(corpus_file), "--n", str(n),
                           "--queries-file", str(queries_file), "--result", str(out), "--memory-mb", str(memory_mb),
                           "--static-encoder", str(static), "--hnsw-max", str(hnsw_max)]
                done = subprocess.run(command)
                if done.returncode != 0:
                    print(f"  {engine} at {n:,} documents failed (exit {done.returncode}): left out", file=sys.stderr)
                    continue
                row[engine] = json.loads(out.read_text())
                e = row[engine]
                print(f"  {n:>10,} {engine}: index {e['index_s']:.1f} s, {e['qps']:.0f} q/s, {e['bytes'] / n:.0f} B/doc, "
                      f"RSS {e['rss_mb']:,.0f} MB", file=sys.stderr, flush=True)
            compare(row)
            rows.append(row)
            keep_rows(rows_file, rows)
    return rows


def keep_rows(rows_file: Path | None, rows: list[dict]) -> None:
    """The rows measured so far, without their results, to ``rows_file`` (``--rows-file``)."""
    if rows_file is not None:
        rows_file.write_text(json.dumps([{k: _without_results(v) for k, v in r.items()} for r in rows]))


def _without_results(entry):
    return {k: v for k, v in entry.items() if k not in ("top", "scores")} if isinstance(entry, dict) else entry


def compare(row: dict) -> None:
    """Each engine's results against salience's one-process index (or, above the sizes it
    runs at, against the bounded-memory build)."""
    for engine, reference in (("salience_2", "salience"), ("salience_ray", "salience"), ("dense_2", "dense")):
        if engine in row and reference in row:
            row[engine]["same"] = row[engine]["top"] == row[reference]["top"]
    reference = "salience" if "salience" in row else "salience_bulk"
    for engine in ("salience_bulk", "sharded_2", "sharded_4", "sharded_2_ray"):
        if engine in row and engine != reference and reference in row:
            # the same scores; documents of equal scores in any order
            row[engine]["same"] = all(len(a) == len(b) and np.allclose(a, b, rtol=1e-6) for a, b in zip(
                row[reference]["scores"], row[engine]["scores"]))
            row[engine]["overlap"] = overlap(row[reference]["top"], row[engine]["top"])
    for peer in ("bm25s", "bm25s_numba", "tantivy"):
        if reference in row and peer in row:
            row[peer]["overlap"] = overlap(row[reference]["top"], row[peer]["top"])
    row["rss_mb"] = max(e["rss_mb"] for e in row.values() if isinstance(e, dict))


def render(rows: list[dict], command: str, seconds: float, gather_ms: float | None = None) -> str:
    import bm25s

    lines = ["## Scale: BM25 and dense indexes on a growing synthetic corpus (`bench/scale.py`)", "",
             f"Command: `{command}`", "",
             "Documents drawn from the words, word frequencies and document lengths of "
             "`../shared/data/dsir/raw_docs.jsonl.gz` (36,155 documents, mean 328 words); 500 three-word queries. "
             f"salience BM25 (Lucene, text field, no stored documents) against bm25s {bm25s.__version__} (Lucene, "
             "English stop words and stemmer) with its numba backend (its fastest; the ratio column compares with "
             "it) and tantivy (Rust, Lucene-style segments, its own writer threads), one thread each for queries "
             "(k=10), queries tokenized inside the timing for every system. Index time: wall seconds from "
             "texts to a searchable index (tokenizing included; the bounded-memory build reads the corpus file as "
             "a stream, the in-memory ones are handed a list). Bytes per document: the saved index folder. "
             "queries/s: the 500 as one batch, the best of 3; p50/p99: one query at a time. Peak RSS: the engine's process "
             "(corpus list included where it is handed one). Same results: the same top-10 scores as salience's "
             "one-process index (above the sizes it runs at, as the bounded-memory build).", "",
             "| documents | words | system | index s | docs/s | bytes/doc | peak RSS MB | queries/s | p50 ms | p99 ms "
             "| q/s vs bm25s numba | same results |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        n = r["n"]
        names = {"salience": "salience BM25", "salience_2": "salience BM25, 2 processes",
                 "salience_ray": "salience BM25, 2 Ray tasks",
                 "salience_bulk": "salience BM25, bounded memory (build, 1 process)",
                 "sharded_2": "salience BM25, 2 shards (2 processes build, scatter-gather)",
                 "sharded_4": "salience BM25, 4 shards (2 processes build, scatter-gather)",
                 "sharded_2_ray": "salience BM25, 2 shards in Ray actors (Ray tasks build)",
                 "tantivy": f"tantivy (top-10 overlap {r.get('tantivy', {}).get('overlap', float('nan')):.3f})",
                 "bm25s_numba": f"bm25s, numba (top-10 overlap {r.get('bm25s_numba', {}).get('overlap', float('nan')):.3f})",
                 "bm25s": f"bm25s, numpy (top-10 overlap {r.get('bm25s', {}).get('overlap', float('nan')):.3f})",
                 "dense": "salience Dense (MiniLM)", "dense_2": "salience Dense, 2 processes (1 thread each)",
                 "dense_static": "salience Dense (static encoder, exact)",
                 "dense_gpu": r.get("dense_gpu", {}).get("name", "")}
        for key, name in names.items():
            if key not in r:
                continue
            e = r[key]
            same = ("yes" if e["same"] else "no") if "same" in e else ""
            ratio = f"{e['qps'] / r['bm25s_numba']['qps']:.2f}x" if name.startswith("salience BM25") and "bm25s_numba" in r else ""
            latency = (f"{e['p50_ms']:.2f} | {e['p99_ms']:.2f}" if "p50_ms" in e else " | ")
            lines.append(f"| {n:,} | {r['words']:,} | {name} | {e['index_s']:.1f} | {n / e['index_s']:,.0f} | "
                         f"{e['bytes'] / n:,.0f} | {e['rss_mb']:,.0f} | {e['qps']:,.0f} | {latency} | {ratio} | {same} |")
    ann = [(r["n"], kind, r["dense_static"][kind]) for r in rows for kind in ("hnsw", "ivfpq")
           if kind in r.get("dense_static", {})]
    if ann:
        lines += ["", "Approximate search over the static encoder's vectors (256 dimensions), against its exact "
                  "search: HNSW (M 32, efSearch 128) and IVF-PQ (4 sqrt(n) cells, 32 bytes a vector, 16 cells "
                  "probed, the best 4k candidates re-scored exactly with the stored vectors). Bytes per vector: the "
                  "serialised faiss structure (HNSW holds the float32 vectors and the graph; IVF-PQ the codes and ids, "
                  "the exact vectors staying in the index's memory-mapped embeddings).", "",
                  "| documents | structure | build s | queries/s | p50 ms | p99 ms | recall@10 vs exact | bytes/vector |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|"]
        for n, kind, e in ann:
            lines.append(f"| {n:,} | {'HNSW' if kind == 'hnsw' else 'IVF-PQ'} | {e['build_s']:.1f} | {e['qps']:,.0f} | "
                         f"{e['p50_ms']:.2f} | {e['p99_ms']:.2f} | {e['recall']:.3f} | {e['bytes_per_vector']:,.0f} |")
    lines += ["", f"Each engine runs in a process of its own over a corpus file. Whole run: {seconds:.0f} s.", ""]
    lines += cost_model(rows, gather_ms=gather_ms)
    return "\n".join(lines)


def _page_cache_note(n: int, size: int) -> str:
    import os

    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if size < 0.6 * ram:
        return ""
    return (f" At {n:,} documents the index ({size / 2**30:,.1f} GiB) outgrew this machine's page cache "
            f"({ram / 2**30:,.0f} GiB of memory in all), so its latencies include disk reads: the fit is pessimistic "
            "for shards whose index stays in memory, as the model's do.")


def cost_model(rows: list[dict], targets_ms=(20, 100), sizes=(10**8, 10**9),
               gather_ms: float | None = None) -> list[str]:
    """What 10^8 and 10^9 documents would need, from the bounded-memory build's curves: bytes
    per document and build rate at the largest size, p99 latency linear in the collection's
    size (fitted through the two largest sizes), the scatter-gather overhead measured with 4
    shards, the search process's resident memory per document."""
    bulk = [(r["n"], r["salience_bulk"]) for r in rows if "salience_bulk" in r and "p99_ms" in r["salience_bulk"]]
    if len(bulk) < 2:
        return []
    (n1, e1), (n2, e2) = bulk[-2], bulk[-1]
    slope = (e2["p99_ms"] - e1["p99_ms"]) / (n2 - n1)
    intercept = e1["p99_ms"] - slope * n1
    p50_slope = (e2["p50_ms"] - e1["p50_ms"]) / (n2 - n1)
    p50_intercept = e1["p50_ms"] - p50_slope * n1
    sharded = [r for r in rows if "sharded_4" in r and "salience" in r and "p99_ms" in r["sharded_4"]]
    overhead = max(0.0, sharded[-1]["sharded_4"]["p99_ms"] - sharded[-1]["salience"]["p99_ms"]) if sharded else 0.0
    if gather_ms is not None:  # measured by an earlier run (--gather-ms) when this one built no shards
        overhead = gather_ms
    bytes_per_doc = e2["bytes"] / n2
    build_rate = n2 / e2["index_s"]
    search_rss_per_doc = e2.get("search_rss_mb", e2["rss_mb"]) * 2**20 / n2
    lines = ["### What 10^8 and 10^9 documents would need (from these curves)", "",
             f"Fitted on the bounded-memory build at {n1:,} and {n2:,} documents: p99 = {intercept:.2f} ms + "
             f"{slope * 1e6:.2f} ms per million documents (posting lists grow with the collection), p50 = "
             f"{p50_intercept:.2f} ms + {p50_slope * 1e6:.2f} ms per million; {bytes_per_doc:,.0f} bytes per "
             f"document on disk; built at {build_rate:,.0f} documents/s per process within "
             f"{e2.get('build_rss_mb', e2['rss_mb']):,.0f} MB; the search process holds "
             f"{search_rss_per_doc:,.0f} bytes per document resident (ids, metadata rows, touched pages); "
             f"scatter-gather over 4 shards adds {overhead:.2f} ms at p99. A shard is sized so that its p99 "
             "plus the gather stays under the target; its index should sit in the page cache (memory = its "
             "bytes on disk + the process's resident bytes); one core per shard answers one query at a time "
             "at that latency (more cores or replicas multiply queries/s)." + _page_cache_note(n2, e2["bytes"]), "",
             "| documents | p99 target | documents per shard | shards | disk | memory per shard | memory in all "
             "| cores (1 query in flight) | queries/s per replica | build (1 process per shard) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for target in targets_ms:
        per_shard = int((target - overhead - intercept) / slope) if slope > 0 else n2
        per_shard = max(10**5, min(per_shard, 10**8))
        per_shard = int(float(f"{per_shard:.2g}"))
        shard_memory = per_shard * (bytes_per_doc + search_rss_per_doc)
        p50 = p50_intercept + p50_slope * per_shard + overhead / 2
        for n in sizes:
            shards = -(-n // per_shard)
            build_h = per_shard / build_rate / 3600
            lines.append(f"| {n:.0e} | {target} ms | {per_shard:,} | {shards:,} | {n * bytes_per_doc / 1e12:,.2f} TB | "
                         f"{shard_memory / 2**30:,.1f} GiB | {shards * shard_memory / 2**40:,.2f} TiB | {shards:,} | "
                         f"{1000 / p50:,.0f} | {build_h:.1f} h |")
    lines += ["", "What breaks first, in order of size: (1) the search process's document store (ids, positions "
              "and metadata as Python objects) grows at the resident bytes per document above, which is what limits "
              "a shard's size in memory before its postings do; (2) the postings a query reads: packed postings "
              "(format 3) stay memory-mapped and score with the collection's statistics per query, so a shard's "
              "memory is its page cache, and a query's terms' postings must be read from it (p99 grows with the "
              "collection, as fitted above; an index larger than the page cache reads from disk); (3) the build's "
              "per-document arrays (a float32 length and a 64-bit id hash: 12 bytes a document, 12 GB at 10^9) "
              "stay in memory during a build, so 10^9 documents are built as shards, not as one index; (4) a "
              "build numbers documents with int32 (2^31 documents per index); posting offsets switch to int64 past "
              "2^31 postings (about 11 million documents of this length), so that is no longer a limit.", ""]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="2000,10000,100000,1000000")
    parser.add_argument("--dense-max", type=int, default=10000, help="largest size indexed densely")
    parser.add_argument("--ray-size", type=int, default=10000, help="largest size also indexed with Ray")
    parser.add_argument("--dense-parallel-max", type=int, default=2000,
                        help="largest size also encoded by 2 processes")
    parser.add_argument("--numpy-max", type=int, default=10**9,
                        help="largest size also run with bm25s' default numpy backend")
    parser.add_argument("--bm25s-max", type=int, default=10**9, help="largest size run with bm25s' numba backend")
    parser.add_argument("--inmemory-max", type=int, default=10**9,
                        help="largest size indexed by salience in memory (one and two processes)")
    parser.add_argument("--parallel-max", type=int, default=10**9,
                        help="largest size also indexed by salience with 2 processes")
    parser.add_argument("--bulk-max", type=int, default=10**12, help="largest size built in bounded memory")
    parser.add_argument("--memory-mb", type=float, default=1024, help="the bounded-memory build's budget")
    parser.add_argument("--tantivy-max", type=int, default=10**9, help="largest size also indexed by tantivy")
    parser.add_argument("--shards-max", type=int, default=10**9, help="largest size also indexed in 2 and 4 shards")
    parser.add_argument("--rows-file", type=Path, default=None,
                        help="keep the rows measured so far here (JSON, without the results)")
    parser.add_argument("--render-rows", type=Path, nargs="+", default=None,
                        help="render rows kept by earlier runs (--rows-file) as one table instead of measuring")
    parser.add_argument("--write", type=Path, default=None)
    parser.add_argument("--run-engine", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--queries-file", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--static-encoder", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--static-max", type=int, default=0, help="largest size indexed densely with the static encoder")
    parser.add_argument("--hnsw-max", type=int, default=10**12, help="largest size an HNSW graph is built over")
    parser.add_argument("--gather-ms", type=float, default=None,
                        help="the cost model's scatter-gather overhead at p99, from an earlier run with shards")
    parser.add_argument("--save-source-stats", type=Path, default=None,
                        help="write the corpus's source statistics (words, frequencies, lengths) to this .npz and stop")
    parser.add_argument("--source-stats", type=Path, default=None,
                        help="read the source statistics from this .npz (a machine without ../shared)")
    parser.add_argument("--gpu-dense", default=None,
                        help="sizes to index with MiniLM on a GPU, documents generated in the process")
    parser.add_argument("--gpu-dtype", default="float16", help="the GPU encoder's weights (--gpu-dense)")
    parser.add_argument("--gpu-device", default="cuda", help="where --gpu-dense runs MiniLM (cpu: a dry run)")
    parser.add_argument("--gpu-model", default=None,
                        help="MiniLM's folder where its pip package is not installed (--gpu-dense)")
    args = parser.parse_args(argv)
    global SOURCE_STATS
    SOURCE_STATS = args.source_stats
    if args.save_source_stats:
        vocabulary, probabilities, lengths = source_statistics()
        np.savez_compressed(args.save_source_stats, vocabulary=vocabulary.astype(str), probabilities=probabilities,
                            lengths=lengths)
        return 0
    if args.run_engine:
        global STATIC_ENCODER, HNSW_MAX
        STATIC_ENCODER, HNSW_MAX = args.static_encoder, args.hnsw_max
        run_engine(args.run_engine, args.corpus, args.n, args.queries_file, args.result, args.memory_mb)
        return 0
    if not RAW.exists() and SOURCE_STATS is None and not args.render_rows:
        print(f"skipping: {RAW} is absent (the shared evaluation data)", file=sys.stderr)
        return 0
    started = time.perf_counter()
    if args.gpu_dense:  # rendered where the peers are installed: --render-rows
        run_gpu_dense([int(s) for s in args.gpu_dense.split(",")], args.gpu_dtype, args.rows_file, args.gpu_model,
                      args.gpu_device)
        return 0
    if args.render_rows:
        rows = sorted((row for path in args.render_rows for row in json.loads(path.read_text())), key=lambda r: r["n"])
    else:
        limits = {"salience": args.inmemory_max, "salience_2": min(args.inmemory_max, args.parallel_max), "salience_ray": args.ray_size,
                  "salience_bulk": args.bulk_max, "sharded_2": args.shards_max, "sharded_4": args.shards_max,
                  "sharded_2_ray": min(args.ray_size, args.shards_max), "tantivy": args.tantivy_max,
                  "bm25s_numba": args.bm25s_max, "bm25s": args.numpy_max, "dense": args.dense_max,
                  "dense_2": args.dense_parallel_max, "dense_static": args.static_max}
        rows = run([int(s) for s in args.sizes.split(",")], limits, args.memory_mb, args.rows_file, args.hnsw_max)
    command = "python bench/scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
    section = render(rows, command.strip(), time.perf_counter() - started, args.gather_ms)
    print(section)
    if args.write:
        sys.path.insert(0, str(ROOT / "bench"))
        from common import write_section

        write_section(args.write, section, marker="bench/scale.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
