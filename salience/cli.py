"""The ``salience`` command: one sub-command group per domain.

    salience search index SOURCE --out DIR [--variant V] [--k1 X] [--b X] [--fields title,text]
    salience search query DIR "query text" [-k 10] [--json] [--explain] [--where JSON]
    salience search evaluate DATASET_DIR [--variant V ...] [--metrics ndcg@10,recall@100] [--json]
    salience search add DIR SOURCE      |  salience search delete DIR ID [ID ...]  |  salience search merge DIR
    salience rank fuse RUN1 RUN2 ... --method rrf [--norm minmax] [--weights 0.7,0.3] --out RUN
    salience rank evaluate QRELS RUN [--metrics ndcg@10,map@1000] [--json]
    salience summarize [FILE|-] [--sentences 3 | --words 100] [--method lexrank] [--query Q] [--json]
    salience summarize evaluate DOCS.jsonl [--method lexrank] [--json]
    salience keywords [FILE|-] [-k 10] [--method yake|...|embed] [--rerank semrerank] [--json]
    salience keywords evaluate DOCS.jsonl [--method yake] [-k 5,10,15] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Sequence

from salience.exceptions import InvalidParameterError, SalienceError

__all__ = ["main"]


def _show_progress(args) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


def _field_weights(text: str | None) -> dict[str, float] | None:
    if not text:
        return None
    weights = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep:
            raise InvalidParameterError(f"--field-weights expects NAME=WEIGHT pairs, e.g. title=2,text=1; got {part!r}.")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise InvalidParameterError(f"--field-weights: weight {value!r} of {name!r} is not a number.") from None
    return weights


def _add_engine_options(parser: argparse.ArgumentParser) -> None:
    from salience.search.scoring import VARIANTS

    group = parser.add_argument_group("scoring")
    group.add_argument("--variant", default="lucene", help=f"one of: {', '.join(VARIANTS)} (default lucene)")
    group.add_argument("--k1", type=float, default=1.5, help="term-frequency saturation (default 1.5)")
    group.add_argument("--b", type=float, default=0.75, help="length normalisation (default 0.75)")
    group.add_argument("--delta", type=float, default=0.5, help="BM25L / BM25+ lower bound (default 0.5)")
    group.add_argument("--fields", default="title,text", help="fields to index (default title,text)")
    group.add_argument("--field-weights", default=None, help="e.g. title=2,text=1 (default 1 each)")
    group.add_argument("--stopwords", default="en", help="stop-word list: en, or none (default en)")
    group.add_argument("--stemmer", default="english", help="Snowball language, or none (default english)")
    group.add_argument(
        "--encoding-errors",
        default="strict",
        choices=("strict", "replace", "ignore"),
        help="what to do with invalid UTF-8 in input files (default strict: stop with file and line)",
    )
    group.add_argument("--quiet", action="store_true", help="no progress bars")


def _make_engine(args):
    from salience.search import BM25
    from salience.text import Tokenizer

    tokenizer = Tokenizer(
        stopwords=None if args.stopwords.lower() == "none" else args.stopwords,
        stemmer=None if args.stemmer.lower() == "none" else args.stemmer,
    )
    return BM25(
        variant=args.variant,
        k1=args.k1,
        b=args.b,
        delta=args.delta,
        fields=args.fields,
        field_weights=_field_weights(args.field_weights),
        tokenizer=tokenizer,
    )


def _cmd_index(args) -> int:
    engine = _make_engine(args)
    start = time.perf_counter()
    engine.index(args.source, show_progress=_show_progress(args), encoding_errors=args.encoding_errors)
    seconds = time.perf_counter() - start
    engine.save(args.out)
    print(f"indexed {engine.n_docs} documents ({len(engine.vocabulary)} terms) in {seconds:.2f}s -> {args.out}")
    return 0


def _parse_where(text: str | None):
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InvalidParameterError(f"--where must be JSON, e.g. '{{\"year\": {{\">=\": 2010}}}}'; {err}") from None


def _cmd_query(args) -> int:
    from salience.search import BM25

    engine = BM25.load(args.index)
    results = engine.search(args.query, k=args.k, where=_parse_where(args.where))
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
        print(json.dumps({"query": args.query, "results": rows}, ensure_ascii=False))
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


def _cmd_evaluate(args) -> int:
    from salience.core.metrics import evaluate, parse_metric
    from salience.core.run import Qrels
    from salience.search.sources import read_queries

    dataset = Path(args.dataset)
    metrics = [m.strip() for m in args.metrics.split(",") if m.strip()]
    depth = max([parse_metric(m)[1] or 1000 for m in metrics] + [args.k or 0])
    qrels_path = dataset / "qrels.tsv"
    if not qrels_path.is_file():
        qrels_path = next(iter(sorted((dataset / "qrels").glob("test.tsv"))), qrels_path) if (dataset / "qrels").is_dir() else qrels_path
    qrels = Qrels.read(qrels_path)
    queries = read_queries(dataset / "queries.jsonl", encoding_errors=args.encoding_errors)
    judged = {q: text for q, text in queries.items() if q in qrels}
    engine = _make_engine(args)
    start = time.perf_counter()
    engine.index(dataset, show_progress=_show_progress(args), encoding_errors=args.encoding_errors)
    index_seconds = time.perf_counter() - start
    engine.search_batch([""], k=depth)  # load the query kernel (numba import / JIT cache) before timing
    start = time.perf_counter()
    run = engine.retrieve(judged, k=depth, show_progress=_show_progress(args))
    search_seconds = time.perf_counter() - start
    report = evaluate(qrels, run, metrics)
    result = {
        **report.means,
        "docs": engine.n_docs,
        "queries": len(queries),
        "queries_evaluated": report.evaluated,
        "queries_skipped_unjudged": len(queries) - len(judged),
        "judged_queries_missing": sum(1 for q in qrels if q not in queries),
        "index_seconds": round(index_seconds, 4),
        "queries_per_second": round(len(judged) / search_seconds, 1) if search_seconds > 0 else None,
        "variant": engine.variant,
        "k1": engine.k1,
        "b": engine.b,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{dataset.name}: {engine.n_docs} documents, {len(queries)} queries "
          f"({len(judged)} judged, {len(queries) - len(judged)} without judgments skipped)")
    print(f"BM25 {engine.variant} k1={engine.k1} b={engine.b}: index {index_seconds:.2f}s, "
          f"{result['queries_per_second']} queries/s")
    width = max(len(m) for m in metrics)
    for m in metrics:
        print(f"  {m:<{width}}  {report.means[m]:.4f}")
    return 0


def _open_index(path: str):
    from salience.search import BM25

    return BM25.load(path)


def _cmd_add(args) -> int:
    engine = _open_index(args.index)
    before = engine.n_docs
    engine.add(args.source, show_progress=_show_progress(args), encoding_errors=args.encoding_errors)
    engine.commit()
    print(f"added {engine.n_docs - before} documents to {args.index} ({len(engine._segments)} segments)")
    return 0


def _cmd_delete(args) -> int:
    engine = _open_index(args.index)
    engine.delete(args.ids)
    engine.commit()
    print(f"deleted {len(args.ids)} documents from {args.index} ({engine.n_docs} remain)")
    return 0


def _cmd_merge(args) -> int:
    engine = _open_index(args.index)
    engine.merge()
    print(f"merged {args.index}: 1 segment, {engine.n_docs} documents")
    return 0


def _cmd_rank_fuse(args) -> int:
    from salience.core.fusion import fuse
    from salience.core.run import Run

    runs = [Run.read_trec(path) for path in args.runs]
    weights = None
    if args.weights:
        try:
            weights = [float(w) for w in args.weights.split(",")]
        except ValueError:
            raise InvalidParameterError(f"--weights must be comma-separated numbers; got {args.weights!r}.") from None
    fused = fuse(runs, method=args.method, norm=args.norm, weights=weights, k=args.k, missing=args.missing)
    if args.depth:
        fused = type(fused)({s: fused[s].top_k(args.depth) for s in fused}, name=fused.name)
    fused.write_trec(args.out, tag=args.tag or f"fused-{args.method}")
    print(f"fused {len(runs)} runs ({len(fused)} subjects) with {args.method}"
          f"{' after ' + args.norm if args.norm else ''} -> {args.out}")
    return 0


def _cmd_rank_evaluate(args) -> int:
    from salience.core.metrics import evaluate
    from salience.core.run import Qrels, Run

    report = evaluate(Qrels.read(args.qrels), Run.read_trec(args.run), args.metrics, missing=args.missing)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print(report)
    return 0


def _read_text(source: str, encoding_errors: str) -> str:
    if source == "-":
        data = sys.stdin.buffer.read()
        where = "standard input"
    else:
        try:
            data = Path(source).read_bytes()
        except OSError as err:
            raise InvalidParameterError(f"{source}: cannot read ({err.strerror}).") from None
        where = source
    try:
        return data.decode("utf-8", errors=encoding_errors)
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise InvalidParameterError(
            f"{where}:{line}: invalid UTF-8; fix the file or pass --encoding-errors replace."
        ) from None


def _cmd_summarize(args) -> int:
    from salience.summarize import summarize

    if args.target == "evaluate":
        return _cmd_summarize_evaluate(args)
    if args.docs is not None:
        raise InvalidParameterError(f"unexpected argument {args.docs!r}; give one FILE (or - for standard input).")
    text = _read_text(args.target, args.encoding_errors)
    summary = summarize(text, method=args.method, sentences=args.sentences, words=args.words,
                        query=args.query, diversity=args.diversity)
    if args.json:
        print(json.dumps({"method": args.method, "indices": summary.indices, "sentences": summary.sentences}, ensure_ascii=False))
    else:
        print(summary.text)
    return 0


def _cmd_summarize_evaluate(args) -> int:
    from salience.summarize.evaluate import evaluate_summaries

    if args.docs is None:
        raise InvalidParameterError("usage: salience summarize evaluate DOCS.jsonl [--method M] [--json]")
    result = evaluate_summaries(args.docs, method=args.method, sentences=args.sentences, words=args.words,
                                diversity=args.diversity, encoding_errors=args.encoding_errors)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['docs']} documents, method {result['method']}: ROUGE-1 {result['rouge1']:.1f}  "
              f"ROUGE-2 {result['rouge2']:.1f}  ROUGE-L {result['rougeL']:.1f}  ({result['docs_per_second']:.0f} docs/s)")
    return 0


def _cmd_keywords(args) -> int:
    from salience.keywords import DocumentFrequency, extract_keyphrases

    if args.target == "evaluate":
        return _cmd_keywords_evaluate(args)
    if args.docs is not None:
        raise InvalidParameterError(f"unexpected argument {args.docs!r}; give one FILE (or - for standard input).")
    k = _single_k(args.k or "10")
    model = DocumentFrequency.load(args.df_model) if args.df_model else None
    text = _read_text(args.target, args.encoding_errors)
    phrases = extract_keyphrases(text, k, method=args.method, document_frequency=model, encoder=args.encoder,
                                 diversity=args.diversity, rerank=args.rerank, **_candidate_options(args))
    if args.json:
        print(json.dumps({"method": args.method, "keyphrases": [{"phrase": p, "score": v} for p, v in phrases]}, ensure_ascii=False))
    else:
        for phrase, value in phrases:
            print(f"{value:10.4f}  {phrase}")
    return 0


def _candidate_options(args) -> dict:
    if args.tagger is not None and args.candidates != "noun_phrases":
        raise InvalidParameterError("--tagger is used only with --candidates noun_phrases.")
    return {"candidates_from": args.candidates, "tagger": args.tagger}


def _single_k(text: str) -> int:
    try:
        values = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise InvalidParameterError(f"-k must be an integer or a comma-separated list; got {text!r}.") from None
    if not values or any(v <= 0 for v in values):
        raise InvalidParameterError(f"-k must be a positive integer; got {text!r}.")
    return max(values)


def _cmd_keywords_evaluate(args) -> int:
    from salience.keywords import DocumentFrequency, evaluate_keyphrases, extract_keyphrases_many
    from salience.keywords.evaluate import read_gold

    if args.docs is None:
        raise InvalidParameterError("usage: salience keywords evaluate DOCS.jsonl [--method M] [-k 5,10,15] [--json]")
    ks = sorted({int(v) for v in str(args.k).split(",")}) if args.k else [5, 10, 15]
    _single_k(",".join(map(str, ks)))
    records = read_gold(args.docs, args.encoding_errors)
    texts = [r["text"] for r in records]
    model = DocumentFrequency.load(args.df_model) if args.df_model else None
    if args.method == "tfidf" and model is None:
        model = DocumentFrequency().fit(texts)  # unsupervised: document frequencies of the evaluated texts
    start = time.perf_counter()
    predictions = [s.ids for s in extract_keyphrases_many(texts, max(ks), method=args.method, document_frequency=model,
                                                          encoder=args.encoder, diversity=args.diversity, rerank=args.rerank,
                                                          **_candidate_options(args))]
    seconds = time.perf_counter() - start
    golds = [r["keyphrases"] for r in records]
    result = {
        "method": args.method + (f"+{args.rerank}" if args.rerank else ""),
        "candidates": args.candidates,
        "docs": len(records),
        "all_gold": evaluate_keyphrases(predictions, texts, golds, ks),
        "present_gold": evaluate_keyphrases(predictions, texts, golds, ks, present_only=True),
        "docs_per_second": len(records) / seconds if seconds > 0 else None,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{len(records)} documents, method {args.method} ({result['docs_per_second']:.0f} docs/s)")
    for label in ("all_gold", "present_gold"):
        row = result[label]
        print(f"  {label.replace('_', ' '):<12} " + "  ".join(f"F1@{k} {row[f'F1@{k}']:.3f}" for k in ks))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="salience", description="Score, rank and select what matters.")
    domains = parser.add_subparsers(dest="domain", required=True)

    search = domains.add_parser("search", help="lexical search with BM25")
    commands = search.add_subparsers(dest="command", required=True)

    p = commands.add_parser("index", help="index a jsonl / jsonl.gz file or a BEIR folder")
    p.add_argument("source")
    p.add_argument("--out", required=True, help="index folder to write (replaced atomically)")
    _add_engine_options(p)
    p.set_defaults(func=_cmd_index)

    p = commands.add_parser("query", help="search a saved index")
    p.add_argument("index")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=10, help="number of results (default 10)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--explain", action="store_true", help="per-term contributions of each result")
    p.add_argument("--where", default=None, help='metadata filter as JSON, e.g. \'{"year": {">=": 2010}}\'')
    p.set_defaults(func=_cmd_query)

    p = commands.add_parser("evaluate", help="index a BEIR folder, run its queries, score against qrels.tsv")
    p.add_argument("dataset")
    p.add_argument("--metrics", default="ndcg@10,recall@100,map@1000")
    p.add_argument("-k", type=int, default=None, help="retrieval depth (default: the largest metric cut-off)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _add_engine_options(p)
    p.set_defaults(func=_cmd_evaluate)

    p = commands.add_parser("add", help="add documents to a saved index as a new segment")
    p.add_argument("index")
    p.add_argument("source")
    p.add_argument("--encoding-errors", default="strict", choices=("strict", "replace", "ignore"))
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_cmd_add)

    p = commands.add_parser("delete", help="delete documents from a saved index by id")
    p.add_argument("index")
    p.add_argument("ids", nargs="+")
    p.set_defaults(func=_cmd_delete)

    p = commands.add_parser("merge", help="merge segments and drop deleted documents")
    p.add_argument("index")
    p.set_defaults(func=_cmd_merge)

    from salience.core.fusion import FUSION_METHODS, FUSION_NORMS

    rank = domains.add_parser("rank", help="fuse and evaluate rankings (TREC run files)")
    commands = rank.add_subparsers(dest="command", required=True)
    p = commands.add_parser("fuse", help="fuse two or more TREC run files into one")
    p.add_argument("runs", nargs="+", help="TREC run files (qid Q0 docid rank score tag)")
    p.add_argument("--method", default="rrf", help=f"one of: {', '.join(FUSION_METHODS)} (default rrf)")
    p.add_argument("--norm", default=None, help=f"score normalisation first: {', '.join(FUSION_NORMS)}")
    p.add_argument("--weights", default=None, help="one weight per run, e.g. 0.7,0.3 (required by wsum)")
    p.add_argument("--k", type=float, default=60, help="RRF constant (default 60)")
    p.add_argument("--depth", type=int, default=None, help="keep the best N items per subject")
    p.add_argument("--missing", default="error", choices=("error", "empty"),
                   help="a subject absent from a run: stop (default) or treat as an empty ranking")
    p.add_argument("--tag", default=None, help="run tag written in the last column")
    p.add_argument("--out", required=True, help="output TREC run file (written atomically)")
    p.set_defaults(func=_cmd_rank_fuse)

    p = commands.add_parser("evaluate", help="score a TREC run against qrels (BEIR qrels.tsv or TREC qrels)")
    p.add_argument("qrels")
    p.add_argument("run")
    p.add_argument("--metrics", default="ndcg@10,recall@100,map@1000,mrr@10")
    p.add_argument("--missing", default="zero", choices=("zero", "skip"),
                   help="judged subjects absent from the run: count as 0 (default) or skip (trec_eval)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_rank_evaluate)

    from salience.summarize.extractive import METHODS as SUMMARY_METHODS

    p = domains.add_parser(
        "summarize",
        help="extractive summary of a text file; 'summarize evaluate DOCS.jsonl' scores against gold summaries",
        description="salience summarize [FILE|-] [options]   or   salience summarize evaluate DOCS.jsonl [options]",
    )
    p.add_argument("target", nargs="?", default="-", help="a text file, - for standard input, or 'evaluate'")
    p.add_argument("docs", nargs="?", default=None, help="with 'evaluate': a jsonl file of {text, summary}")
    p.add_argument("--method", default="lexrank", choices=SUMMARY_METHODS)
    length = p.add_mutually_exclusive_group()
    length.add_argument("--sentences", type=int, default=None, help="number of sentences (default 3; evaluate: gold length)")
    length.add_argument("--words", type=int, default=None, help="word budget instead of a sentence count")
    p.add_argument("--query", default=None, help="focus the summary on this query")
    p.add_argument("--diversity", type=float, default=0.0, help="MMR redundancy control in [0, 1] (default 0)")
    p.add_argument("--encoding-errors", default="strict", choices=("strict", "replace", "ignore"))
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_summarize)

    from salience.keywords.extract import METHODS as KEYWORD_METHODS

    p = domains.add_parser(
        "keywords",
        help="keyphrases of a text file; 'keywords evaluate DOCS.jsonl' scores against gold keyphrases",
        description="salience keywords [FILE|-] [options]   or   salience keywords evaluate DOCS.jsonl [options]",
    )
    p.add_argument("target", nargs="?", default="-", help="a text file, - for standard input, or 'evaluate'")
    p.add_argument("docs", nargs="?", default=None, help="with 'evaluate': a jsonl file of {text, keyphrases}")
    p.add_argument("-k", default=None, help="number of keyphrases (default 10); evaluate: cut-offs, default 5,10,15")
    p.add_argument("--method", default="yake", choices=KEYWORD_METHODS)
    p.add_argument("--df-model", default=None, help="document-frequency model (JSON) for tfidf")
    p.add_argument("--rerank", default=None, choices=("semrerank",), help="revise the method's scores with SemRe-Rank")
    p.add_argument("--encoder", default=None,
                   help="sentence-transformers model name or folder for embed/semrerank (default: bundled all-MiniLM-L6-v2)")
    p.add_argument("--diversity", type=float, default=0.5, help="MMR diversity of embed, 0..1 (default 0.5)")
    p.add_argument("--candidates", default="auto", choices=("auto", "runs", "ngrams", "noun_phrases"),
                   help="candidate phrases: stop-word-bounded runs or n-grams (auto picks by length), or noun phrases "
                        "from part-of-speech tags (needs spaCy: pip install 'salience[pos]')")
    p.add_argument("--tagger", default=None, help="spaCy pipeline for --candidates noun_phrases (default en_core_web_sm)")
    p.add_argument("--encoding-errors", default="strict", choices=("strict", "replace", "ignore"))
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_keywords)

    data = domains.add_parser("data", help="select training data for a target distribution (DSIR)")
    data_cmds = data.add_subparsers(dest="command", required=True)
    p = data_cmds.add_parser("select", help="importance-resample raw documents toward a target sample")
    p.add_argument("--target", nargs="+", required=True, help="target sample: jsonl or jsonl.gz files")
    p.add_argument("--raw", nargs="+", required=True, help="raw pool: jsonl or jsonl.gz files")
    p.add_argument("--k", type=int, required=True, help="number of documents to select")
    p.add_argument("--out", required=True, help="selected documents (.jsonl or .jsonl.gz), each with salience_weight")
    p.add_argument("--method", default="dsir", choices=("dsir", "classifier", "perplexity"))
    p.add_argument("--sampling", default="gumbel", choices=("gumbel", "topk", "replacement"))
    p.add_argument("--text-field", default="text")
    p.add_argument("--label-field", default=None, help="count the selection by this field in the report")
    p.add_argument("--min-tokens", type=int, default=0, help="ignore raw documents with fewer tokens")
    p.add_argument("--filter", action="append", default=[], dest="filters", metavar="STAT>=X",
                   help="eligibility rule on words, mean_word_length, alpha_ratio, symbol_ratio, uppercase_ratio or "
                        "line_count, e.g. 'alpha_ratio>=0.7' (repeatable)")
    p.add_argument("--buckets", type=int, default=10_000)
    p.add_argument("--orders", default="1,2", help="n-gram orders to hash (default 1,2: unigrams and bigrams)")
    p.add_argument("--length-normalize", action="store_true", help="divide DSIR's log weight by the n-gram count")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--shard-mb", type=float, default=8.0, help="shard size in MB of text (default 8)")
    p.add_argument("--executor", default="local", choices=("local", "ray"))
    p.add_argument("--quota-field", default=None, help="select per value of this field, in the target's proportions")
    p.add_argument("--keep-work", action="store_true", help="keep the shard cache after a successful run")
    p.add_argument("--quiet", action="store_true", help="no progress bar (shown when standard error is a terminal)")
    p.add_argument("--work-dir", default=None, help="shard cache (default OUT.work); a rerun skips finished shards")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--strict", action="store_true", help="a record without the text field is an error, not skipped")
    p.add_argument("--on-error", default="raise", choices=("raise", "skip"), help="invalid UTF-8/JSON or corrupt gzip")
    p.set_defaults(func=_cmd_data_select)

    p = data_cmds.add_parser("dedup", help="drop exact (and near) duplicate documents")
    p.add_argument("inputs", nargs="+", help="jsonl, jsonl.gz or parquet files")
    p.add_argument("--out", required=True, help="kept documents (.jsonl or .jsonl.gz)")
    p.add_argument("--near", action="store_true", help="also drop near duplicates (MinHash LSH)")
    p.add_argument("--threshold", type=float, default=0.8, help="Jaccard similarity of word 5-grams (default 0.8)")
    p.add_argument("--num-perm", type=int, default=128)
    p.add_argument("--text-field", default="text")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--executor", default="local", choices=("local", "ray"))
    p.add_argument("--strict", action="store_true")
    p.add_argument("--on-error", default="raise", choices=("raise", "skip"))
    p.add_argument("--quiet", action="store_true", help="no progress bar (shown when standard error is a terminal)")
    p.set_defaults(func=_cmd_data_dedup)

    p = data_cmds.add_parser("report", help="precision, recall and KL reduction of a selection")
    p.add_argument("selected", help="the selected documents (jsonl or jsonl.gz)")
    p.add_argument("--target", nargs="+", required=True)
    p.add_argument("--raw", nargs="+", required=True)
    p.add_argument("--label-field", default=None, help="field holding each document's domain")
    p.add_argument("--target-label", default=None, help="the target's value of --label-field")
    p.add_argument("--text-field", default="text")
    p.add_argument("--buckets", type=int, default=10_000)
    p.add_argument("--min-tokens", type=int, default=0, help="raw documents shorter than this are not in the pool")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_data_report)
    return parser


def _orders(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise InvalidParameterError(f"--orders must be comma-separated integers such as 1,2; got {text!r}.") from None


def _cmd_data_dedup(args) -> int:
    from salience.data.dedup import dedup_files

    report = dedup_files(args.inputs, args.out, near=args.near, threshold=args.threshold, num_perm=args.num_perm,
                         text_field=args.text_field, workers=args.workers, executor=args.executor, strict=args.strict,
                         on_error=args.on_error, progress=_show_progress(args))
    print(json.dumps(report.to_dict()))
    return 0


def _cmd_data_report(args) -> int:
    from salience.data import HashedNgrams
    from salience.data.report import selection_report

    if (args.label_field is None) != (args.target_label is None):
        raise InvalidParameterError("--label-field and --target-label go together.")
    result = selection_report(args.selected, args.target, args.raw, features=HashedNgrams(buckets=args.buckets),
                              text_field=args.text_field, label_field=args.label_field, target_label=args.target_label,
                              min_tokens=args.min_tokens)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>22}  {value:.4f}" if isinstance(value, float) else f"{key:>22}  {value}")
    return 0


def _cmd_data_select(args) -> int:
    from salience.data import HashedNgrams, select_documents

    report = select_documents(args.target, args.raw, args.k, args.out, method=args.method, sampling=args.sampling,
                              seed=args.seed, text_field=args.text_field, label_field=args.label_field,
                              quota_field=args.quota_field, min_tokens=args.min_tokens, filters=args.filters,
                              features=HashedNgrams(_orders(args.orders), buckets=args.buckets),
                              length_normalize=args.length_normalize, workers=args.workers, executor=args.executor,
                              shard_bytes=int(args.shard_mb * (1 << 20)), work_dir=args.work_dir,
                              keep_work=args.keep_work, strict=args.strict, on_error=args.on_error, progress=_show_progress(args))
    print(json.dumps(report.to_dict()))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SalienceError as err:
        print(f"salience: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("salience: interrupted; nothing was left half-written.", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
