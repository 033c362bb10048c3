"""``salience verify UNIT ...``: was the importance real? The removal protocol
(:mod:`salience.core.verify`) over a scoring command's output, by the registered verifier of
that kind of unit."""

from __future__ import annotations

import json
from pathlib import Path

from salience.cli._common import add_n_jobs, add_on_error, add_output_options, add_seed, choices_of, emit, positive_int
from salience.exceptions import InputFormatError, InvalidParameterError

#: written in every report the command writes, so that a rerun may replace it
MARK = "salience.verification"


def _add_protocol_options(p) -> None:
    p.add_argument("--steps", type=positive_int, default=10, help="removal steps (default 10)")
    p.add_argument("--random", type=int, default=20, dest="n_random",
                   help="random orders the scores are compared with (default 20; at least 2)")
    p.add_argument("--alpha", type=float, default=0.01, help="significance level of the verdict (default 0.01)")
    add_seed(p)
    p.add_argument("--out", default=None,
                   help="the report: JSON, or an HTML page with the curves when it ends in .html; refused when it "
                        "exists and is not an earlier report, or is an input")


def _check_protocol(args) -> None:
    """The protocol's options, named as the command line spells them, before any work."""
    if args.n_random < 2:
        raise InvalidParameterError(f"--random must be at least 2 (the spread of random orders needs two); got "
                                    f"{args.n_random}.")
    if not 0 < args.alpha < 1:
        raise InvalidParameterError(f"--alpha must lie between 0 and 1; got {args.alpha}.")


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


def _is_own_report(path: Path) -> bool:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")[:4096] if path.is_file() else ""
    except OSError:
        return False
    return MARK in text


def _write(args, result, inputs) -> None:
    if args.out is None:
        return
    from salience.io.files import atomic_write_text, check_output_path

    out = check_output_path(args.out, inputs, what="report", is_own=_is_own_report)
    body = result.to_dict()
    if out.suffix.lower() in (".html", ".htm"):
        text = result.html().replace("<body>", f"<body><!-- {MARK} -->", 1)
    else:
        text = json.dumps({"format": MARK, **body}, indent=1) + "\n"
    atomic_write_text(out, text)


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


def _cmd_sentences(args) -> int:
    from salience.cli._common import read_text
    from salience.core.base import create
    from salience.io.files import check_output_path
    from salience.summarize import score_sentences, split_sentences

    _check_protocol(args)
    inputs = [args.file] if args.file != "-" else []
    if args.out is not None:
        check_output_path(args.out, inputs, what="report", is_own=_is_own_report)
    text = read_text(args.file, args.on_error)
    sentences = [s.text for s in split_sentences(text)]
    scores = score_sentences(sentences, method=args.method, language=args.language)
    verifier = create("verify", "sentences", language=args.language, steps=args.steps, n_random=args.n_random,
                      seed=args.seed, alpha=args.alpha)
    result = verifier.verify(scores, sentences=sentences)
    result.method = args.method
    _write(args, result, inputs)
    emit(args, result.to_dict(), str(result) + (f" -> {args.out}" if args.out else ""))
    return 0


def _cmd_layers(args) -> int:
    import numpy as np

    from salience.cli.compress import _load, _text_of, _token_ids
    from salience.compress.evaluate import windows as consecutive_windows
    from salience.compress.weights import calibration_windows
    from salience.core.base import create
    from salience.io.files import check_output_path

    _check_protocol(args)
    if args.out is not None:
        check_output_path(args.out, [args.calib], what="report", is_own=_is_own_report)
    text = _text_of(args.calib, args.on_error)  # read, and refused when empty, before the model loads
    model, tokenizer = _load(args)
    ids = np.asarray(_token_ids(tokenizer, text), dtype=np.int64)
    half = len(ids) // 2
    if half <= args.seqlen:
        raise InvalidParameterError(f"{args.calib} holds {len(ids)} tokens: its two halves (one scores the layers, "
                                    f"the other is held out to verify them) need more than {args.seqlen} each; give "
                                    "more text or a smaller --seqlen.")
    scoring = calibration_windows(ids[:half], seqlen=args.seqlen, n_samples=args.calib_windows, seed=args.seed)
    held_out = consecutive_windows(ids[half:], args.seqlen, args.calib_windows)
    scores = create("layers", args.method).score(model, scoring)
    verifier = create("verify", "layers", max_fraction=args.max_fraction, steps=args.steps, n_random=args.n_random,
                      seed=args.seed, alpha=args.alpha)
    result = verifier.verify(scores, model=model, windows=held_out)
    result.method = args.method
    _write(args, result, [args.calib])
    rho = result.extras.get("one_removed", {}).get("spearman")
    emit(args, result.to_dict(), str(result) + (f"; Spearman with each layer's one-removed change {rho:+.3f}"
                                                if rho is not None else "") + (f" -> {args.out}" if args.out else ""))
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

    p = commands.add_parser("sentences", help="summary sentences: the document's content left as the top-scored "
                                              "sentences go, against random orders")
    p.add_argument("file", help="a text file, or - for standard input")
    p.add_argument("--method", default="lexrank", choices=choices_of("summarize"),
                   help="the summarizer whose sentence scores are verified (default lexrank)")
    p.add_argument("--language", default="auto", help="the text's language (default auto: detected)")
    _add_protocol_options(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_sentences)

    p = commands.add_parser("layers", help="decoder layer importance: held-out perplexity as the top-scored layers "
                                           "are removed, against random orders")
    p.add_argument("model", help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
    p.add_argument("--method", default="block_influence", choices=choices_of("layers"),
                   help="the layer importance verified (default block_influence)")
    p.add_argument("--calib", required=True,
                   help="a text: its first half scores the layers, its second half is held out to verify them")
    p.add_argument("--calib-windows", type=positive_int, default=8, help="windows of each half (default 8)")
    p.add_argument("--seqlen", type=positive_int, default=256, help="tokens per window (default 256)")
    p.add_argument("--max-fraction", type=float, default=0.5, help="the largest share of layers removed (default 0.5)")
    _add_protocol_options(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_layers)
