"""``salience keywords extract|evaluate`` and ``salience summarize extract|evaluate``."""

from __future__ import annotations

import time

from salience.cli._common import (add_on_error, add_output_options, emit, given, ks_list, method_option, positive_int,
                                  read_text, show_progress)
from salience.cli.params import add_param_option, method_params
from salience.exceptions import InvalidParameterError


def _keyword_method(args) -> tuple[str, dict]:
    """The method that runs (``--method``, or ``--tier``'s, or the fast tier's) and only the
    options the user set over the tier's: the library refuses those that do not apply."""
    from salience.keywords import DocumentFrequency
    from salience.keywords.tiers import tier_method

    options = {"language": args.language, **given(args, "tagger", "encoder", "diversity", "rerank")}
    if args.candidates is not None:
        options["candidates_from"] = args.candidates
    if args.df_model:
        options["document_frequency"] = DocumentFrequency.load(args.df_model)
    method, options = tier_method(args.method, args.tier, options)
    return method, {**options, **method_params(args, "keywords", method, {"k": "-k"})}


def _cmd_keywords_extract(args) -> int:
    from salience.keywords import extract_keyphrases

    if _is_records(args.file):
        return _keywords_of_records(args)
    text = _nonempty_text(args)
    method, options = _keyword_method(args)
    phrases = extract_keyphrases(text, k=args.k, method=method, **options)
    emit(args, {"method": method, "tier": args.tier, "keyphrases": [{"phrase": p, "score": v} for p, v in phrases]},
         _phrase_lines(method, phrases))
    return 0


def _is_records(path: str) -> bool:
    return path.endswith((".jsonl", ".jsonl.gz"))


def _records(args) -> tuple[list, list[str]]:
    """Ids and texts of a jsonl file's records (``--field``; ``id`` or the line number); a record
    without the field is an error naming file and line, or skipped under ``--on-error skip``."""
    from salience.io.files import iter_jsonl

    ids, texts = [], []
    for lineno, record in iter_jsonl(args.file, args.on_error):
        text = record.get(args.field)
        if not isinstance(text, str):
            if args.on_error == "skip":
                continue
            raise InvalidParameterError(f"{args.file}:{lineno}: record has no text field {args.field!r} (a string); "
                                        f"its fields are {', '.join(sorted(record)) or 'none'}.")
        ids.append(record.get("id", lineno))
        texts.append(text)
    if not texts:
        raise InvalidParameterError(f"{args.file}: no records with a text field {args.field!r}; nothing to do.")
    return ids, texts


def _nonempty_text(args) -> str:
    text = read_text(args.file, args.on_error)
    if not text.strip():
        where = "standard input" if args.file == "-" else args.file
        raise InvalidParameterError(f"{where} is empty (or only white space): there is no text to read.")
    return text


def _phrase_lines(method: str, phrases) -> str:
    """Keyphrases best first with their scores: four significant digits, never ``-0.0000``.
    YAKE's score S(kw) is lower-is-better; salience ranks by its negation (every method's scores
    are higher-is-better), so a header says what the numbers are."""
    note = "-S(kw), YAKE's score negated: higher is better" if method == "yake" else "higher is better"
    lines = [f"{'score':>10}  keyphrase ({note})"]
    lines += [f"{value + 0.0:10.4g}  {phrase}" for phrase, value in phrases]  # + 0.0: no negative zero
    return "\n".join(lines)


def _document_frequency(method: str, texts: list[str], options: dict):
    """The texts' own document frequencies, learned by the method's own ``fit`` (its stop words
    and language)."""
    from salience.core.base import create

    return create("keywords", method, **options).fit(texts).document_frequency_


def _keywords_of_records(args) -> int:
    """A jsonl file of records: one output line per record, ``{"id", "language", "keyphrases"}``.
    The texts are extracted together, so they are one corpus for document frequencies (yake's
    ``corpus_df``; tfidf's and kpminer's, learned from them unless ``--df-model`` gives some)."""
    import json

    from salience.keywords import extract_keyphrases_batch
    from salience.keywords.extract import learns_document_frequency
    from salience.text.languages import detect_languages

    ids, texts = _records(args)
    method, options = _keyword_method(args)
    if learns_document_frequency(method) and "document_frequency" not in options:
        options["document_frequency"] = _document_frequency(method, texts, options)
    results = extract_keyphrases_batch(texts, k=args.k, show_progress=show_progress(args), method=method, **options)
    languages = detect_languages(texts) if args.language == "auto" else [args.language] * len(texts)
    for doc_id, language, phrases in zip(ids, languages, results):
        print(json.dumps({"id": doc_id, "language": language,
                          "keyphrases": [{"phrase": p, "score": v} for p, v in phrases]}, ensure_ascii=False))
    return 0


def _cmd_keywords_evaluate(args) -> int:
    from salience.keywords import evaluate_keyphrases, extract_keyphrases_batch
    from salience.keywords.evaluate import read_gold
    from salience.keywords.extract import learns_document_frequency

    ks = ks_list(args.k)
    records = read_gold(args.gold, args.on_error)
    texts = [r["text"] for r in records]
    method, options = _keyword_method(args)
    if learns_document_frequency(method) and "document_frequency" not in options:
        # unsupervised: the evaluated texts' frequencies
        options["document_frequency"] = _document_frequency(method, texts, options)
    start = time.perf_counter()
    predictions = [s.ids for s in extract_keyphrases_batch(texts, k=max(ks), show_progress=show_progress(args),
                                                           method=method, **options)]
    seconds = time.perf_counter() - start
    golds = [r["keyphrases"] for r in records]
    result = {
        "method": method + (f"+{args.rerank}" if args.rerank else ""),
        "tier": args.tier,
        "candidates": options.get("candidates_from", "auto"),
        "language": args.language,
        "docs": len(records),
        "all_gold": evaluate_keyphrases(predictions, texts, golds, ks).means,
        "present_gold": evaluate_keyphrases(predictions, texts, golds, ks, present_only=True).means,
        "docs_per_second": len(records) / seconds if seconds > 0 else None,
    }
    lines = [f"{len(records)} documents, method {result['method']} ({result['docs_per_second'] or 0:.0f} docs/s)"]
    for label in ("all_gold", "present_gold"):
        row = result[label]
        lines.append(f"  {label.replace('_', ' '):<12} " + "  ".join(f"F1@{k} {row[f'F1@{k}']:.3f}" for k in ks))
    emit(args, result, "\n".join(lines))
    return 0


def _summary_options(args) -> dict:
    return {"method": args.method, "diversity": args.diversity, "language": args.language,
            **given(args, "similarity", "threshold", "sentences", "words"), **method_params(args, "summarize", args.method)}


#: records of a jsonl file summarised together (summarize_batch)
_SUMMARY_BATCH = 256


def _cmd_summarize_extract(args) -> int:
    import json

    from salience.core.base import create
    from salience.summarize import summarize, summarize_batch

    if not _is_records(args.file):
        text = _nonempty_text(args)
        summary = summarize(text, query=args.query, **_summary_options(args))
        _note_empty_summary(args, text, summary)
        # every sentence's score, in document order: what ``salience verify sentences --scores`` reads
        emit(args, {"method": args.method, "indices": summary.indices, "sentences": summary.sentences,
                    "scores": [float(v) for v in summary.scores.values]}, summary.text)
        return 0
    # a jsonl file of records: one JSON line out per record, as keywords extract
    ids, texts = _records(args)
    options = _summary_options(args)
    length = {key: options.pop(key) for key in ("sentences", "words", "diversity") if key in options}
    scorer = create("summarize", options.pop("method"), **options)  # one term cache for every record
    for start in range(0, len(texts), _SUMMARY_BATCH):  # a batch at a time: output flows, memory stays bounded
        summaries = summarize_batch(texts[start:start + _SUMMARY_BATCH], query=args.query, scorer=scorer, **length)
        for doc_id, summary in zip(ids[start:start + _SUMMARY_BATCH], summaries):
            print(json.dumps({"id": doc_id, "summary": summary.text, "indices": summary.indices,
                              "sentences": summary.sentences, "scores": [float(v) for v in summary.scores.values]},
                             ensure_ascii=False))
    return 0


def _note_empty_summary(args, text: str, summary) -> None:
    """A word budget below every sentence's length gives no summary: say why, as pack does."""
    if summary.sentences or args.words is None or getattr(args, "quiet", False):
        return
    import sys

    from salience.text.sentences import split_sentences

    shortest = min((len(s.text.split()) for s in split_sentences(text)), default=0)
    print(f"salience: note: no sentence fits in --words {args.words} (the shortest has {shortest} words); the "
          "summary is empty.", file=sys.stderr)


def _cmd_summarize_evaluate(args) -> int:
    from salience.summarize.evaluate import evaluate_summaries

    options = _summary_options(args)
    report = evaluate_summaries(args.gold, on_error=args.on_error, **options)
    result = {**report.info, **report.means}
    several = result["references"] > result["docs"]
    line = (f"{result['docs']} documents, method {result['method']}: ROUGE-1 {result['rouge1']:.1f}  "
            f"ROUGE-2 {result['rouge2']:.1f}  ROUGE-L {result['rougeL']:.1f}  ({result['docs_per_second']:.0f} docs/s)")
    if several:
        line += (f"\n  best of {result['references']} references; their mean: ROUGE-1 {result['rouge1_mean']:.1f}  "
                 f"ROUGE-2 {result['rouge2_mean']:.1f}  ROUGE-L {result['rougeL_mean']:.1f}")
    emit(args, result, line)
    return 0


def add_language(p) -> None:
    p.add_argument("--language", default="auto", type=language_code,
                   help="ISO 639-1 code of the texts' language (stop words, stemming), or auto (default: detect "
                        "each text's); the codes are listed in docs/keywords-and-summaries.md")


def language_code(value: str) -> str:
    """argparse type: 'auto' or a known language, else an error that lists the codes."""
    import argparse

    from salience.text.languages import check_language

    try:
        return check_language(value)
    except InvalidParameterError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _keyword_method_options(p) -> None:
    from salience.keywords.extract import CANDIDATE_SOURCES
    from salience.keywords.tiers import TIERS

    method_option(p, "--method", "keywords", None, "keyphrase method (default: the --tier's)")
    p.add_argument("--tier", default=None, choices=tuple(TIERS),
                   help="fast (the default: yake) or best (several methods fused; slower); not with --method")
    p.add_argument("--df-model", default=None, help="document-frequency model (JSON) for tfidf and kpminer")
    p.add_argument("--rerank", default=None, choices=("semrerank",), help="revise the method's scores with SemRe-Rank")
    p.add_argument("--encoder", default=None,
                   help="sentence-transformers model name or folder for embed/semrerank (default: bundled all-MiniLM-L6-v2)")
    p.add_argument("--diversity", type=float, default=None, help="MMR diversity of embed, 0..1 (default 0.5)")
    p.add_argument("--candidates", default=None, choices=CANDIDATE_SOURCES,
                   help="candidate phrases: stop-word-bounded runs or n-grams (auto picks by length), or noun phrases "
                        "from part-of-speech tags (needs spaCy: pip install 'salience[pos]')")
    p.add_argument("--tagger", default=None, help="spaCy pipeline for --candidates noun_phrases (default en_core_web_sm)")
    add_param_option(p, "the keyphrase method")
    add_language(p)
    add_on_error(p)
    add_output_options(p)


def _summary_method_options(p) -> None:
    method_option(p, "--method", "summarize", "lexrank", "summarisation method")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--sentences", type=positive_int, default=None,
                        help="number of sentences (default 3; evaluate: the gold length)")
    length.add_argument("--words", type=positive_int, default=None, help="word budget instead of a sentence count")
    p.add_argument("--diversity", type=float, default=0.0, help="MMR redundancy control in [0, 1] (default 0)")
    p.add_argument("--similarity", default=None, help="textrank only: bm25 (default) or overlap")
    p.add_argument("--threshold", type=float, default=None, help="lexrank only: cosine cut-off for thresholded LexRank")
    add_param_option(p, "the summarisation method")
    add_language(p)
    add_on_error(p)
    add_output_options(p)


def add_commands(domains) -> None:
    keywords = domains.add_parser("keywords", help="keyphrases of a text, and their evaluation against gold keyphrases")
    commands = keywords.add_subparsers(dest="command", required=True)
    p = commands.add_parser("extract", help="keyphrases of a text file (or - for standard input), or of each record "
                                            "of a jsonl file (one JSON line out per record)")
    p.add_argument("file", help="a text file, - for standard input, or a .jsonl / .jsonl.gz file of records")
    p.add_argument("-k", type=positive_int, default=10, help="number of keyphrases (default 10)")
    p.add_argument("--field", default="text", help="the text field of jsonl records (default text)")
    _keyword_method_options(p)
    p.set_defaults(func=_cmd_keywords_extract)
    p = commands.add_parser("evaluate", help="F1@k against a jsonl of {text, keyphrases} (stemmed exact match)")
    p.add_argument("gold", help="jsonl of {text, keyphrases}")
    p.add_argument("-k", default="5,10,15", help="cut-offs, comma-separated (default 5,10,15)")
    _keyword_method_options(p)
    p.set_defaults(func=_cmd_keywords_evaluate)

    summarize = domains.add_parser("summarize", help="extractive summaries, and their evaluation against gold summaries")
    commands = summarize.add_subparsers(dest="command", required=True)
    p = commands.add_parser("extract", help="extractive summary of a text file (or - for standard input), or of each "
                                            "record of a jsonl file (one JSON line out per record)")
    p.add_argument("file", help="a text file, - for standard input, or a .jsonl / .jsonl.gz file of records")
    p.add_argument("--field", default="text", help="the text field of jsonl records (default text)")
    p.add_argument("--query", default=None, help="focus the summary on this query")
    _summary_method_options(p)
    p.set_defaults(func=_cmd_summarize_extract)
    p = commands.add_parser("evaluate", help="ROUGE against a jsonl of {text, summary}")
    p.add_argument("gold", help="jsonl of {text, summary}")
    _summary_method_options(p)
    p.set_defaults(func=_cmd_summarize_evaluate)
