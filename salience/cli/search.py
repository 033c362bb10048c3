"""``salience search``: index, query, evaluate, add, delete, merge: BM25, dense, or both fused (pack,
rerank and distill: :mod:`salience.cli.search_neural`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from salience.cli._common import add_on_error, add_output_options, emit, positive_int, refuse_unused, show_progress
from salience.exceptions import InvalidParameterError
from salience.io.files import check_output_path
from salience.cli.search_fit import add_fit_option, fit_static_encoder
from salience.cli.search_engines import (_add_dense_options, _add_engine_options, _add_fusion_options,
                                         _add_parallel_options, _add_shard_options, _executor,
                                         _hybrid, _make_engine, load_index)


def _cmd_index(args) -> int:
    from salience.search.formats import is_dense_folder, is_sharded_folder
    from salience.search.store import is_own_output

    from salience.search.shards import ShardedIndex

    check_output_path(args.out, [args.source], what="index",
                      is_own=lambda p: is_own_output(p) or (p.is_dir() and (is_dense_folder(p) or is_sharded_folder(p))))
    from salience.search.bulk import DEFAULT_MEMORY_MB

    refuse_unused(args, not args.dense, ("memory_mb",), "to BM25 builds: a dense index holds its vectors in memory")
    memory_mb = DEFAULT_MEMORY_MB if args.memory_mb is None else args.memory_mb
    engine = _make_engine(args)
    start = time.perf_counter()
    if args.shards:
        if args.dense:
            raise InvalidParameterError("--shards splits a BM25 index: a dense index is one folder.")
        # written, not opened: the command holds one document at a time (--memory-mb bounds the shards' builds)
        counts = ShardedIndex.write(args.source, args.out, n_shards=args.shards, executor=_executor(args),
                                    n_jobs=args.n_jobs, show_progress=show_progress(args), on_error=args.on_error,
                                    memory_mb=memory_mb, **engine.get_params())
        seconds = time.perf_counter() - start
        result = {"documents": sum(counts), "shards": len(counts), "seconds": round(seconds, 3), "out": args.out}
        emit(args, result, f"indexed {sum(counts)} documents in {len(counts)} shards in {seconds:.2f}s -> {args.out}")
        return 0
    if not args.dense:
        engine.build(args.source, args.out, memory_mb=memory_mb, on_error=args.on_error, n_jobs=args.n_jobs,
                     executor=args.executor, show_progress=show_progress(args))
        seconds = time.perf_counter() - start
        result = {"documents": engine.n_docs, "terms": len(engine.vocabulary), "seconds": round(seconds, 3),
                  "out": args.out}
        emit(args, result, f"indexed {engine.n_docs} documents ({len(engine.vocabulary)} terms) in {seconds:.2f}s "
                           f"-> {args.out}")
        return 0
    fitted = fit_static_encoder(args, quiet=getattr(args, "quiet", False), progress=show_progress(args))
    if fitted is not None:  # the seconds below include the fit
        args.encoder = fitted
        engine = _make_engine(args)
    engine.fit(args.source, show_progress=show_progress(args), on_error=args.on_error, n_jobs=args.n_jobs,
               executor=args.executor)
    seconds = time.perf_counter() - start
    engine.save(args.out)
    result = {"documents": engine.n_docs, "dimension": engine.dimension, "encoder": engine.encoder_name_,
              "encoder_fitted": fitted, "truncated_documents": engine.truncated_documents, "seconds": round(seconds, 3),
              "out": args.out}
    emit(args, result, f"encoded {engine.n_docs} documents ({engine.dimension} dimensions, "
                       f"{engine.truncated_documents} truncated at the encoder's window) in {seconds:.2f}s -> {args.out}")
    return 0


def _parse_where(text: str | None):
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidParameterError(f"--where must be JSON, e.g. '{{\"year\": {{\">=\": 2010}}}}'; {err}") from None


def _searcher(engine, args):
    """``engine``, or with ``--hybrid DENSE_INDEX`` it fused with that dense index."""
    if not args.hybrid:
        return engine
    if engine.hybrid_role != "lexical":
        raise InvalidParameterError(f"--hybrid fuses a BM25 index with a dense one: {args.index} is not a BM25 index.")
    dense = load_index(args.hybrid)
    if dense.hybrid_role != "dense":
        raise InvalidParameterError(f"--hybrid {args.hybrid}: not a dense index (salience search index --dense).")
    return _hybrid(engine, dense, args)


def _cmd_query(args) -> int:
    engine = load_index(args.index)
    searcher = _searcher(engine, args)
    if args.explain and not engine.explains_terms:
        raise InvalidParameterError("--explain shows BM25's term contributions: query a BM25 index.")
    results = searcher.search(args.query, k=args.k, where=_parse_where(args.where))
    rows = []
    for rank, (doc_id, score) in enumerate(results, start=1):
        row = {"rank": rank, "id": doc_id, "score": score}
        if engine.store_documents:
            doc = engine.document(doc_id)
            row["title"] = doc.get("title", "")
            row["text"] = doc.get("text", "")
        if args.explain:
            row["explanation"] = engine.explain(args.query, doc_id).to_dict()
        rows.append(row)
    if args.json:
        emit(args, {"query": args.query, "results": rows})
        return 0
    if not rows:
        print("no matching documents")
    for row in rows:
        snippet = (row.get("title") or row.get("text", ""))[:90].replace("\n", " ")
        print(f"{row['rank']:>3}. {row['score']:8.4f}  {row['id']}  {snippet}")
        if args.explain:
            for term in row["explanation"]["terms"]:
                print(f"       {term['term']:<18} tf={term['tf']:<4g} idf={term['idf']:.3f}  +{term['contribution']:.4f}")
    return 0


def _cmd_run(args) -> int:
    """Every query of a file searched, written as a TREC run (Pyserini's ``search``)."""
    from salience.cli.rank import is_own_run
    from salience.core.run import Run, check_trec_token
    from salience.io.documents import read_queries

    check_output_path(args.out, [args.index, args.queries] + ([args.hybrid] if args.hybrid else []), what="run",
                      is_own=lambda p: is_own_run(p, args.tag, prefix="run-"))
    queries = read_queries(args.queries, on_error=args.on_error)
    if not queries:
        raise InvalidParameterError(f"--queries {args.queries}: no queries in it.")
    engine = load_index(args.index)
    tag = args.tag or ("run-hybrid" if args.hybrid else f"run-{type(engine).__name__.lower()}")
    check_trec_token(tag, "--tag")  # the run's columns, checked before the search
    for query_id in queries:
        check_trec_token(query_id, f"query id (in {args.queries})")
    searcher = _searcher(engine, args)
    searcher.search_batch([next(iter(queries.values()))], k=1)  # the query kernel or encoder loaded before timing
    start = time.perf_counter()
    run = Run(dict(zip(queries, searcher.search_batch(list(queries.values()), k=args.k))))
    seconds = time.perf_counter() - start
    run.write_trec(args.out, tag=tag)
    result = {"queries": len(queries), "k": args.k, "seconds": round(seconds, 4),
              "queries_per_second": round(len(queries) / seconds, 1) if seconds > 0 else None, "out": args.out}
    emit(args, result, f"{len(queries)} queries searched (top {args.k}) in {seconds:.2f} s -> {args.out}")
    return 0


def _cmd_evaluate(args) -> int:
    from salience.cli.rank import evaluate_quietly, nothing_judged
    from salience.core.metrics import parse_metric
    from salience.core.run import Qrels
    from salience.io.documents import read_queries

    dataset = Path(args.dataset)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    depth = max([parse_metric(m)[1] or 1000 for m in metrics] + [args.k or 0])
    qrels_path = dataset / "qrels.tsv"
    if not qrels_path.is_file() and (dataset / "qrels").is_dir():
        qrels_path = next(iter(sorted((dataset / "qrels").glob("test.tsv"))), qrels_path)
    qrels = Qrels.read(qrels_path, on_error=args.on_error)
    queries = read_queries(dataset / "queries.jsonl", on_error=args.on_error)
    judged = {q: text for q, text in queries.items() if q in qrels}
    engine = _make_engine(args)
    start = time.perf_counter()
    if args.shards:
        if args.dense or args.hybrid_eval:
            raise InvalidParameterError("--shards splits a BM25 index: evaluate --dense or --hybrid without it.")
        from salience.search.shards import ShardedIndex

        engine = ShardedIndex.build(dataset, n_shards=args.shards, executor=_executor(args), n_jobs=args.n_jobs,
                                    show_progress=show_progress(args), on_error=args.on_error, **engine.get_params())
    else:
        engine.fit(dataset, show_progress=show_progress(args), on_error=args.on_error)
    searcher = engine
    if args.hybrid_eval:
        from salience.search import Dense

        dense = Dense(encoder=args.encoder, quantize=args.quantize, fields=args.fields, backend=args.backend,
                      long_documents=args.long_documents, device=args.device, dtype=args.dtype)
        dense.fit(dataset, show_progress=show_progress(args), on_error=args.on_error)
        searcher = _hybrid(engine, dense, args)
    index_seconds = time.perf_counter() - start  # both indexes of a hybrid, the encoding included
    from salience.core.run import Run

    # one query before timing, so one-time loading (the numba kernels' cache, the encoder's first
    # call) is not counted against the queries/s of any kind of index
    searcher.search_batch(list(judged.values())[:1] or [""], k=depth)
    start = time.perf_counter()
    if args.hybrid_eval or args.dense or args.shards:
        run = Run(dict(zip(judged, searcher.search_batch(list(judged.values()), k=depth))))
    else:
        run = engine.retrieve(judged, k=depth, n_jobs=args.n_jobs, show_progress=show_progress(args))
    search_seconds = time.perf_counter() - start
    report = evaluate_quietly(qrels, run, metrics)
    if report.matched == 0:
        return nothing_judged(report, qrels_path)
    result = {
        **report.means,
        "docs": engine.n_docs,
        "queries": len(queries),
        "evaluated": report.evaluated,  # the names rank evaluate uses
        "skipped_unjudged": len(queries) - len(judged),
        "judged_queries_missing": sum(1 for q in qrels if q not in queries),
        "index_seconds": round(index_seconds, 4),
        "queries_per_second": round(len(judged) / search_seconds, 1) if search_seconds > 0 else None,
        "system": repr(searcher),
    }
    width = max(len(m) for m in metrics)
    text = "\n".join(
        [f"{dataset.name}: {engine.n_docs} documents, {len(queries)} queries "
         f"({len(judged)} judged, {len(queries) - len(judged)} without judgments skipped)",
         f"{searcher!r}: index {index_seconds:.2f}s, {result['queries_per_second']} queries/s"]
        + [f"  {m:<{width}}  {report.means[m]:.4f}" for m in metrics])
    emit(args, result, text)
    return 0


def _cmd_add(args) -> int:
    engine = load_index(args.index, change=True)
    before = engine.n_docs
    engine.add(args.source, show_progress=show_progress(args), on_error=args.on_error, n_jobs=args.n_jobs,
               executor=args.executor)
    engine.commit()
    added = engine.n_docs - before
    emit(args, {"added": added, "documents": engine.n_docs, "segments": engine.n_segments},
         f"added {added} documents to {args.index} ({engine.n_segments} segments)")
    return 0


def _cmd_delete(args) -> int:
    engine = load_index(args.index, change=True)
    engine.delete(args.ids)
    engine.commit()
    emit(args, {"deleted": len(args.ids), "documents": engine.n_docs},
         f"deleted {len(args.ids)} documents from {args.index} ({engine.n_docs} remain)")
    return 0


def _cmd_prune(args) -> int:
    import numpy as np

    from salience.core.scores import Scores
    from salience.data.scorers import text_statistics
    from salience.search.passage_pruning import prune_index_passages

    engine = load_index(args.index)
    if engine.holds_shards or not engine.store_documents:
        raise InvalidParameterError(f"{args.index} keeps no document text to score (a sharded index, or one built "
                                    "without stored documents): prune the corpus before indexing it.")
    ids = engine.ids
    if args.unit == "passage":
        if args.field not in engine.fields_:
            raise InvalidParameterError(f"--field {args.field}: {args.index} indexes the fields "
                                        f"{', '.join(engine.fields_)}; name the one to cut into passages.")
        result = prune_index_passages(engine, lambda texts: text_statistics(list(texts))[args.by], fraction=args.fraction,
                                      passage_field=args.field, max_words=args.max_words)
        engine.commit()
        emit(args, {"unit": "passage", "documents": len(ids), **result.report(), "remaining": engine.n_docs,
                    "by": args.by},
             f"pruned {result.pruned} of {result.passages} passages from {args.index} (lowest {args.by}): "
             f"{len(result.changed)} documents shortened, {len(result.removed)} removed; {engine.n_docs} remain")
        return 0
    texts = [" ".join(str(engine.document(i).get(field) or "") for field in engine.fields_) for i in ids]
    scores = Scores(text_statistics(texts)[args.by].astype(float), ids=ids)
    pruned = engine.prune(scores, fraction=args.fraction)
    engine.commit()
    emit(args, {"unit": "document", "documents": len(ids), "pruned": len(pruned), "remaining": engine.n_docs,
                "by": args.by, "threshold": float(np.sort(scores.values)[len(pruned) - 1]) if pruned else None},
         f"pruned {len(pruned)} of {len(ids)} documents from {args.index} (lowest {args.by}); {engine.n_docs} remain")
    return 0


def _cmd_merge(args) -> int:
    engine = load_index(args.index, change=True)
    engine.merge()
    emit(args, {"segments": 1, "documents": engine.n_docs}, f"merged {args.index}: 1 segment, {engine.n_docs} documents")
    return 0


def add_commands(domains) -> None:
    from salience.cli import answer, search_neural

    search = domains.add_parser("search", help="lexical and dense search: BM25, sentence embeddings, both fused")
    commands = search.add_subparsers(dest="command", required=True)

    p = commands.add_parser("index", help="index a jsonl / jsonl.gz file or a BEIR folder")
    p.add_argument("source", help="documents: a jsonl or jsonl.gz file (one record with an id and text fields a "
                                  "line) or a BEIR folder holding corpus.jsonl")
    p.add_argument("--out", required=True, help="index folder to write: new, empty, or an earlier index (replaced atomically)")
    _add_engine_options(p)
    _add_dense_options(p, hybrid=False)
    add_fit_option(p)
    _add_parallel_options(p)
    _add_shard_options(p)
    p.add_argument("--memory-mb", type=float, default=None,
                   help="BM25: postings held in memory before they are flushed to disk as a run and merged "
                        "(default 1024; any corpus size builds within about this much; an interrupted build "
                        "resumes from its last run when started again)")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_index)

    p = commands.add_parser("query", help="search a saved index")
    p.add_argument("index", help="index folder (salience search index)")
    p.add_argument("query", help="the query text")
    p.add_argument("-k", type=positive_int, default=10, help="number of results (default 10)")
    p.add_argument("--explain", action="store_true", help="per-term contributions of each result")
    p.add_argument("--where", default=None, help='metadata filter as JSON, e.g. \'{"year": {">=": 2010}}\'')
    p.add_argument("--hybrid", default=None, metavar="DENSE_INDEX",
                   help="fuse this BM25 index's ranking with a dense index's (salience search index --dense)")
    _add_fusion_options(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_query)

    p = commands.add_parser("run", help="search a saved index with every query of a file, write a TREC run")
    p.add_argument("index", help="index folder (salience search index)")
    p.add_argument("--queries", required=True, help="queries.jsonl or a BEIR folder (its queries.jsonl)")
    p.add_argument("-k", type=positive_int, default=100, help="results per query (default 100)")
    p.add_argument("--hybrid", default=None, metavar="DENSE_INDEX",
                   help="fuse this BM25 index's ranking with a dense index's (salience search index --dense)")
    _add_fusion_options(p)
    p.add_argument("--out", required=True, help="output TREC run file: new, or an earlier run output")
    p.add_argument("--tag", default=None, help="run tag (default run-bm25, run-dense or run-hybrid)")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_run)

    p = commands.add_parser("evaluate", help="index a BEIR folder, run its queries, score against qrels.tsv")
    p.add_argument("dataset", help="BEIR folder: corpus.jsonl, queries.jsonl and qrels.tsv (or qrels/test.tsv)")
    p.add_argument("--metrics", default="ndcg@10,recall@100,map@1000",
                   help="comma-separated metrics with cut-offs: ndcg, recall, map, mrr, precision (default "
                        "ndcg@10,recall@100,map@1000)")
    p.add_argument("-k", type=positive_int, default=None, help="retrieval depth (default: the largest metric cut-off)")
    _add_engine_options(p)
    _add_dense_options(p, hybrid=False)
    p.add_argument("--hybrid", dest="hybrid_eval", action="store_true",
                   help="BM25 and a dense index (--encoder, --quantize) fused (--fusion, --weight)")
    _add_fusion_options(p)
    _add_parallel_options(p)
    _add_shard_options(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_evaluate)

    p = commands.add_parser("add", help="add documents to a saved index as a new segment")
    p.add_argument("index", help="index folder (salience search index)")
    p.add_argument("source", help="documents to add: a jsonl or jsonl.gz file or a BEIR folder")
    _add_parallel_options(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_add)

    p = commands.add_parser("delete", help="delete documents from a saved index by id")
    p.add_argument("index", help="index folder (salience search index)")
    p.add_argument("ids", nargs="+", help="ids of the documents to delete")
    add_output_options(p)
    p.set_defaults(func=_cmd_delete)

    from salience.data.scorers import STATISTICS

    p = commands.add_parser("prune", help="static pruning: delete the lowest-quality share of an index's passages "
                                          "(or whole documents)")
    p.add_argument("index", help="index folder (salience search index) that stores its documents")
    p.add_argument("--fraction", type=float, required=True, help="share of the passages (documents) to delete, in [0, 1)")
    p.add_argument("--by", default="words", choices=STATISTICS,
                   help="the query-agnostic score whose lowest go (default words: the shortest passages; chosen with "
                        "the unit on dev splits; docs/search.md)")
    p.add_argument("--unit", default="passage", choices=("passage", "document"),
                   help="passage (default): cut each document's --field into passages and delete the lowest-scored "
                        "share of all passages, a document keeping the rest of its text; document: delete whole "
                        "documents")
    p.add_argument("--field", default="text", help="the field cut into passages (default text); the others (a title) "
                                                   "stay while any passage of the document is left")
    p.add_argument("--max-words", type=int, default=0,
                   help="pack whole sentences into passages of up to this many words (default 0: a passage a sentence)")
    add_output_options(p)
    p.set_defaults(func=_cmd_prune)

    search_neural.add_commands(commands)
    answer.add_commands(commands)

    p = commands.add_parser("merge", help="merge segments and drop deleted documents")
    p.add_argument("index", help="index folder (salience search index)")
    add_output_options(p)
    p.set_defaults(func=_cmd_merge)
