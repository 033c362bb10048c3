"""``salience verify UNIT ...``: was the importance real? The removal protocol
(:mod:`salience.core.verify`) over a scoring command's output, by the registered verifier of
that kind of unit."""

from __future__ import annotations

import json
from pathlib import Path

from salience.cli._common import (add_n_jobs, add_on_error, add_output_options, choices_of, emit, method_option,
                                  positive_int)
from salience.cli.verify_common import (MARK, _add_protocol_options, _check_protocol, _is_own_report, _write,
                                       read_score_list)
from salience.cli.verify_models import add_model_commands
from salience.exceptions import InputFormatError, InvalidParameterError


def _read_values(path: str, field: str, on_error: str) -> tuple[list[str], list[float]]:
    """(ids, values) of a scoring command's jsonl output (``data value`` writes ``id`` and
    ``salience_value``)."""
    from salience.io.files import iter_jsonl

    ids, values = [], []
    for lineno, record in iter_jsonl(path, on_error):
        if "id" not in record or field not in record:
            raise InputFormatError(f"{path}:{lineno}: record has no {'id' if 'id' not in record else repr(field)} "
                                   f"field (scores are read from --value-field {field}, ids from id).")
        value = record[field]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputFormatError(f"{path}:{lineno}: {field} must be a number; got {value!r}.")
        ids.append(str(record["id"]))
        values.append(float(value))
    if not ids:
        raise InputFormatError(f"{path}: no scores.")
    return ids, values


def _document_scorer() -> type:
    from salience.data.methods import DocumentScorer

    return DocumentScorer


def _text_units() -> tuple:
    from salience.explain.text import UNITS

    return UNITS


def _text_methods() -> tuple:
    from salience.explain.shapley import model_agnostic_methods

    return model_agnostic_methods()


def _keyphrase_outcomes() -> tuple:
    from salience.keywords.verify_keyphrases import OUTCOMES

    return OUTCOMES


def _read_attributions(path: str, spans: list, text: str) -> list[float]:
    """The attributions of ``salience explain text MODEL TEXT --json``'s output, one per unit of
    the text (their spans must be the text's)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise InputFormatError(f"{path}: not salience explain text --json's output ({err}).") from None
    units = data.get("units") if isinstance(data, dict) else None
    if not isinstance(units, list) or not all(isinstance(u, dict) and isinstance(u.get("attribution"), (int, float))
                                              for u in units):
        raise InputFormatError(f"{path}: not salience explain text --json's output (units with attributions).")
    given = [(u.get("start"), u.get("end")) for u in units]
    if given != [tuple(span) for span in spans]:
        raise InputFormatError(f"{path}: its {len(units)} units are not the {len(spans)} units of this text (explain "
                               "the same text with the same --unit).")
    return [float(u["attribution"]) for u in units]


def _cmd_features(args) -> int:
    from salience.cli.explain import _text_argument
    from salience.core.base import create
    from salience.explain import attribute_text
    from salience.explain.text import masked_texts, text_units
    from salience.io.files import check_output_path
    from salience.text.classifier import TextClassifier

    import numpy as np

    _check_protocol(args)
    inputs = [args.model] + ([args.attributions] if args.attributions else [])
    if args.out is not None:
        check_output_path(args.out, inputs, what="report", is_own=_is_own_report)
    text = _text_argument(args.text)
    spans = text_units(text, args.unit)
    if not spans:
        raise InvalidParameterError(f"the text has no {args.unit}s to verify (it is empty or all spaces).")
    model = TextClassifier.load(args.model)
    if args.attributions:
        scores, method = _read_attributions(args.attributions, spans, text), "given"
    else:
        attribution = attribute_text(model, text, unit=args.unit, method=args.method, n_samples=args.samples,
                                     seed=args.seed)
        scores, method = attribution.values[0], args.method

    def score_of(rows) -> np.ndarray:  # the classifier's score of the text with the absent units deleted
        return np.asarray(model(masked_texts(text, spans, np.atleast_2d(rows) > 0.5, "")), dtype=np.float64)

    verifier = create("verify", "features", steps=args.steps, n_random=args.n_random, seed=args.seed, alpha=args.alpha)
    result = verifier.verify(scores, model=score_of, x=np.ones(len(spans)), baseline=np.zeros(len(spans)))
    result.unit, result.method = f"features ({args.unit}s)", method
    _write(args, result, inputs)
    emit(args, result.to_dict(), str(result) + (f" -> {args.out}" if args.out else ""))
    return 0


def _cmd_examples(args) -> int:
    from salience.core.base import create
    from salience.core.scores import Scores
    from salience.cli.valuation import _features, _model, read_labelled

    from salience.io.files import check_output_path

    _check_protocol(args)
    if args.out is not None:  # refused before the refits
        check_output_path(args.out, [args.values, args.train, args.test], what="report", is_own=_is_own_report)
    ids, values = _read_values(args.values, args.value_field, args.on_error)
    X, y, train_ids = read_labelled(args.train, _features(args), args.label_field, args.id_field, args.on_error)
    X_test, y_test, _ = read_labelled(args.test, _features(args), args.label_field, args.id_field, args.on_error)
    train_ids = [str(i) for i in train_ids]
    if len(set(train_ids)) != len(train_ids):
        raise InvalidParameterError(f"{args.train}: an id is given twice (--id-field {args.id_field}): every row needs "
                                    "its own to be matched with its value.")
    verifier = create("verify", "examples", model=_model(args.model), max_fraction=args.max_fraction,
                      n_jobs=args.n_jobs, steps=args.steps, n_random=args.n_random, seed=args.seed, alpha=args.alpha)
    result = verifier.verify(Scores(values, ids=ids), train=(X, y), test=(X_test, y_test), ids=train_ids)
    result.method = args.model or "logistic"
    _write(args, result, [args.values, args.train, args.test])
    emit(args, result.to_dict(), str(result) + (f" -> {args.out}" if args.out else ""))
    return 0


def _texts_of(path: str, field: str, on_error: str) -> tuple[list[str], list[str]]:
    """(ids, texts) of a jsonl file's records (``id``, else the line number)."""
    from salience.io.files import iter_jsonl

    ids, texts = [], []
    for lineno, record in iter_jsonl(path, on_error):
        text = record.get(field)
        if not isinstance(text, str):
            raise InputFormatError(f"{path}:{lineno}: record has no text in field {field!r}.")
        ids.append(str(record.get("id", lineno)))
        texts.append(text)
    if not texts:
        raise InputFormatError(f"{path}: no records.")
    return ids, texts


def _cmd_selection(args) -> int:
    from salience.core.base import create
    from salience.core.scores import Scores
    from salience.io.files import check_output_path

    _check_protocol(args)
    inputs = [args.pool, *args.target] + ([args.scores] if args.scores else [])
    if args.out is not None:
        check_output_path(args.out, inputs, what="report", is_own=_is_own_report)
    ids, texts = _texts_of(args.pool, args.field, args.on_error)
    if len(set(ids)) != len(ids):
        raise InputFormatError(f"{args.pool}: an id is given twice: every document needs its own.")
    target = [t for path in args.target for t in _texts_of(path, args.field, args.on_error)[1]]
    if args.scores:
        given, values = _read_values(args.scores, args.value_field, args.on_error)
        scores, method = Scores(values, ids=given), "given"
    else:
        scores, method = create("data", args.method).fit(target, texts).score(texts, ids=ids), args.method
    verifier = create("verify", "selection", max_fraction=args.max_fraction, steps=args.steps, n_random=args.n_random,
                      seed=args.seed, alpha=args.alpha)
    result = verifier.verify(scores, texts=texts, target=target, ids=ids)
    result.method = method
    _write(args, result, inputs)
    emit(args, result.to_dict(), str(result) + (f" -> {args.out}" if args.out else ""))
    return 0


def _cmd_sentences(args) -> int:
    from salience.cli._common import read_text
    from salience.core.base import create
    from salience.io.files import check_output_path
    from salience.summarize import score_sentences, split_sentences

    _check_protocol(args)
    inputs = [p for p in (args.file, args.reference, args.scores) if p is not None and p != "-"]
    if args.out is not None:
        check_output_path(args.out, inputs, what="report", is_own=_is_own_report)
    text = read_text(args.file, args.on_error)
    reference = read_text(args.reference, args.on_error) if args.reference else None
    sentences = [s.text for s in split_sentences(text)]
    if args.scores is not None:
        scores, method = _read_sentence_scores(args.scores, len(sentences), args.file)
    else:
        scores, method = score_sentences(sentences, method=args.method, language=args.language), args.method
    verifier = create("verify", "sentences", language=args.language, steps=args.steps, n_random=args.n_random,
                      seed=args.seed, alpha=args.alpha)
    result = verifier.verify(scores, sentences=sentences, reference=reference)
    result.method = method
    _write(args, result, inputs)
    emit(args, result.to_dict(), str(result) + (f" -> {args.out}" if args.out else ""))
    return 0


def _read_sentence_scores(path: str, n_sentences: int, text_path: str) -> tuple[list[float], str]:
    """(scores, method) of ``salience summarize extract FILE --json``'s output: one score per
    sentence of the text, in document order."""
    values, method = read_score_list(path, "salience summarize extract --json", "sentence")
    if len(values) != n_sentences:
        raise InputFormatError(f"{path} scores {len(values)} sentences but {text_path} splits into {n_sentences}: "
                               "the scores are of another text (or another sentence splitter).")
    return values, method


def _read_keyphrases(path: str, on_error: str) -> dict:
    """id -> Scores of ``salience keywords extract DOCS.jsonl``'s output (``{"id", "keyphrases":
    [{"phrase", "score"}, ...]}`` per line)."""
    from salience.core.scores import Scores
    from salience.io.files import iter_jsonl

    out = {}
    for lineno, record in iter_jsonl(path, on_error):
        phrases = record.get("keyphrases")
        if "id" not in record or not isinstance(phrases, list) or not all(
                isinstance(p, dict) and isinstance(p.get("phrase"), str) and isinstance(p.get("score"), (int, float))
                and not isinstance(p.get("score"), bool) for p in phrases):
            raise InputFormatError(f"{path}:{lineno}: not a line of salience keywords extract's output (an id and "
                                   "keyphrases: a list of {phrase, score}).")
        if phrases:
            out[str(record["id"])] = Scores([p["score"] for p in phrases], ids=[p["phrase"] for p in phrases])
    if not out:
        raise InputFormatError(f"{path}: no keyphrases.")
    return out


def _cmd_keyphrases(args) -> int:
    from salience.core.base import create
    from salience.core.verify import verify_subjects
    from salience.io.files import check_output_path, iter_jsonl
    from salience.keywords import extract_keyphrases_batch

    _check_protocol(args)
    inputs = [args.docs] + ([args.keyphrases] if args.keyphrases else [])
    if args.out is not None:
        check_output_path(args.out, inputs, what="report", is_own=_is_own_report)
    ids, texts, titles = [], [], []
    for lineno, record in iter_jsonl(args.docs, args.on_error):
        text = record.get(args.field)
        if not isinstance(text, str) or not text.strip():
            raise InputFormatError(f"{args.docs}:{lineno}: record has no text in field {args.field!r}.")
        title = record.get(args.title_field) if args.title_field else None
        if args.title_field and (not isinstance(title, str) or not title.strip()):
            raise InputFormatError(f"{args.docs}:{lineno}: record has no title in field {args.title_field!r}.")
        if title is None and "\n" in text.strip():
            title = text.strip().split("\n", 1)[0]  # a first line of its own: the title (Inspec's layout)
        ids.append(str(record.get("id", lineno)))
        texts.append(text)
        titles.append(title)
    if len(set(ids)) != len(ids):
        raise InputFormatError(f"{args.docs}: an id is given twice: every document needs its own.")
    if args.keyphrases:
        given = _read_keyphrases(args.keyphrases, args.on_error)
        unknown = sorted(set(given) - set(ids))
        if unknown:
            raise InputFormatError(f"{args.keyphrases}: {len(unknown)} ids are no document of {args.docs} "
                                   f"(e.g. {unknown[0]!r}).")
        subjects = [i for i, doc_id in enumerate(ids) if doc_id in given]
        scores = [given[ids[i]] for i in subjects]
        method = "given"
    else:
        scores_all = extract_keyphrases_batch(texts, k=args.k, method=args.method, language=args.language)
        subjects = [i for i, s in enumerate(scores_all) if len(s)]
        scores = [scores_all[i] for i in subjects]
        method = args.method
    verifier = create("verify", "keyphrases", outcome=args.outcome, language=args.language, steps=args.steps,
                      n_random=args.n_random, seed=args.seed, alpha=args.alpha,
                      max_fraction=args.max_fraction)
    each = verifier.verify_collection(scores, texts, titles=[titles[i] for i in subjects], subjects=subjects)
    for result in each:
        result.method = method
    pooled = each[0] if len(each) == 1 else verify_subjects(each, alpha=args.alpha, seed=args.seed)
    body = {"unit": "keyphrases", "method": method, "outcome": args.outcome, **pooled.to_dict()}
    if len(each) > 1:
        body["subjects"] = [{"id": ids[i], **r.to_dict()} for i, r in zip(subjects, each)]
    if args.out is not None:
        if str(args.out).lower().endswith((".html", ".htm")) and len(each) > 1:
            raise InvalidParameterError("an HTML report draws one document's curves: write JSON for many documents.")
        out = check_output_path(args.out, inputs, what="report", is_own=_is_own_report)
        from salience.io.files import atomic_write_text

        atomic_write_text(out, each[0].html().replace("<body>", f"<body><!-- {MARK} -->", 1)
                          if out.suffix.lower() in (".html", ".htm") else
                          json.dumps({"format": MARK, **body}, indent=1) + "\n")
    text = (f"{len(each)} documents, keyphrases by {method}, outcome {args.outcome}: {pooled.verdict} "
            f"(gap {pooled.gap:+.4f}, 95% CI {pooled.ci95[0]:+.4f} to {pooled.ci95[1]:+.4f}, p = {pooled.p_value:.3g})"
            if len(each) > 1 else str(pooled))
    emit(args, body, text + (f" -> {args.out}" if args.out else ""))
    return 0


def add_commands(domains) -> None:
    from salience.cli.valuation import MODELS

    verify = domains.add_parser("verify", help="was the importance real? remove the top-scored units in steps and "
                                               "compare with random removal")
    commands = verify.add_subparsers(dest="command", required=True)

    p = commands.add_parser("examples", help="data values: refit the model without the top-valued training rows "
                                             "(point removal) against random orders")
    p.add_argument("values", help="the values: jsonl with id and the value field (salience data value's output)")
    p.add_argument("--value-field", default="salience_value", help="the field holding each value (default "
                                                                   "salience_value)")
    p.add_argument("--train", required=True, help="the labelled training records the values are of (jsonl)")
    p.add_argument("--test", required=True, help="the labelled test records the refitted model is scored on")
    p.add_argument("--features", default=None,
                   help="one field holding a list of numbers, or comma-separated fields holding one number each")
    p.add_argument("--label-field", default="label", help="the records' label field (default label)")
    p.add_argument("--id-field", default="id", help="the records' id field (default id; else the line number)")
    p.add_argument("--model", default=None, choices=MODELS,
                   help="the model the values are for, refitted at every step (default logistic; knn for "
                        "knn_shapley's values)")
    p.add_argument("--max-fraction", type=float, default=0.5, help="the largest share of rows removed (default 0.5)")
    _add_protocol_options(p)
    add_n_jobs(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_examples)

    p = commands.add_parser("selection", help="a data selection's pool scores: the KL of the target from the kept pool "
                                              "as the top-scored documents are removed, against random orders")
    p.add_argument("pool", help="the raw pool: jsonl with id and text")
    p.add_argument("--target", nargs="+", required=True, help="target sample(s): jsonl with text")
    p.add_argument("--scores", default=None,
                   help="the pool's scores verified: jsonl with id and the value field, one line per pool document "
                        "(default: scored here by --method)")
    p.add_argument("--value-field", default="salience_score", help="the field holding each score (default "
                                                                   "salience_score)")
    method_option(p, "--method", "data", "dsir", "the pool scorer, without --scores", subclass_of=_document_scorer())
    p.add_argument("--field", default="text", help="the text field (default text)")
    p.add_argument("--max-fraction", type=float, default=0.5, help="the largest share of the pool removed (default "
                                                                   "0.5)")
    _add_protocol_options(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_selection)

    p = commands.add_parser("features", help="a text's words (or tokens, sentences): a saved text classifier's score "
                                             "as the top-attributed units are deleted, against random orders")
    p.add_argument("model", help="a saved TextClassifier folder")
    p.add_argument("text", help="the text, or - for standard input")
    p.add_argument("--unit", default="word", choices=_text_units(), help="unit (default word)")
    p.add_argument("--attributions", default=None,
                   help="the attributions verified: salience explain text MODEL TEXT --json's output (default: "
                        "attributed here by --method)")
    p.add_argument("--method", default="kernel_shap", choices=_text_methods(),
                   help="the attribution method, without --attributions (default kernel_shap)")
    p.add_argument("--samples", type=positive_int, default=None, help="model evaluations of the attribution")
    _add_protocol_options(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_features)

    p = commands.add_parser("sentences", help="summary sentences: the document's content left as the top-scored "
                                              "sentences go, against random orders")
    p.add_argument("file", help="a text file, or - for standard input")
    p.add_argument("--method", default="lexrank", choices=choices_of("summarize"),
                   help="the summarizer whose sentence scores are verified (default lexrank)")
    p.add_argument("--scores", default=None,
                   help="the scores verified instead of --method's: salience summarize extract FILE --json's output")
    p.add_argument("--language", default="auto", help="the text's language (default auto: detected)")
    p.add_argument("--reference", default=None,
                   help="a file holding a reference summary: the outcome is its ROUGE-1 recall by the kept sentences "
                        "(default: the content left, label-free)")
    _add_protocol_options(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_sentences)

    from salience.keywords.tiers import TIERS

    p = commands.add_parser("keyphrases", help="keyphrases: each document searched by its title in the collection "
                                               "(or embedded) as its top keyphrases are deleted, against random orders")
    p.add_argument("docs", help="the documents: jsonl with id and text (the collection each is searched in)")
    p.add_argument("--keyphrases", default=None,
                   help="the keyphrases verified: salience keywords extract DOCS.jsonl's output (default: extracted "
                        "here by --method)")
    p.add_argument("--method", default=TIERS["fast"][0], choices=choices_of("keywords"),
                   help=f"the extractor whose keyphrases are verified, without --keyphrases (default "
                        f"{TIERS['fast'][0]}, the fast tier's)")
    p.add_argument("-k", type=positive_int, default=20, help="keyphrases per document, without --keyphrases "
                                                             "(default 20)")
    p.add_argument("--outcome", default="search", choices=_keyphrase_outcomes(),
                   help="search: the document's BM25 margin for its title; embedding: its similarity to the whole "
                        "(default search)")
    p.add_argument("--field", default="text", help="the text field (default text)")
    p.add_argument("--title-field", default=None,
                   help="the field holding each title (default: the text's first line when it has several, else its "
                        "first sentence)")
    p.add_argument("--language", default="en", help="the texts' language (default en)")
    p.add_argument("--max-fraction", type=float, default=1.0, help="the largest share of keyphrases removed (default 1)")
    _add_protocol_options(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_keyphrases)

    add_model_commands(commands)
