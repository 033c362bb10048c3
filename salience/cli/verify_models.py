"""``salience verify passages|layers|structures|weights``: the verifiers whose outcome needs a
causal language model (an answer's log-probability, a held-out perplexity), beside the others
of :mod:`salience.cli.verify`."""

from __future__ import annotations

import json
from pathlib import Path

from salience.cli._common import add_on_error, add_output_options, choices_of, emit, positive_int
from salience.cli.verify_common import (_add_protocol_options, _check_protocol, _is_own_report, _write,
                                       read_score_list)
from salience.exceptions import InputFormatError, InvalidParameterError


def _structure_units() -> tuple:
    from salience.compress.structured import STRUCTURE_UNITS

    return STRUCTURE_UNITS


def _inputs(args) -> list[str]:
    return [p for p in (args.calib, getattr(args, "scores", None)) if p is not None]


def _model_and_halves(args):
    """(model, scoring windows, held-out windows): ``--calib``'s first half scores the units,
    its second half is held out to verify them; the text is read (and refused when empty) and
    the output path checked before the model loads."""
    import numpy as np

    from salience.cli.compress import _load, _text_of, _token_ids
    from salience.compress.evaluate import windows as consecutive_windows
    from salience.compress.weights import calibration_windows
    from salience.io.files import check_output_path

    _check_protocol(args)
    if args.out is not None:
        check_output_path(args.out, _inputs(args), what="report", is_own=_is_own_report)
    text = _text_of(args.calib, args.on_error)
    model, tokenizer = _load(args)
    ids = np.asarray(_token_ids(tokenizer, text), dtype=np.int64)
    half = len(ids) // 2
    if half <= args.seqlen:
        raise InvalidParameterError(f"{args.calib} holds {len(ids)} tokens: its two halves (one scores the units, "
                                    f"the other is held out to verify them) need more than {args.seqlen} each; give "
                                    "more text or a smaller --seqlen.")
    scoring = calibration_windows(ids[:half], seqlen=args.seqlen, n_samples=args.calib_windows, seed=args.seed)
    return model, scoring, consecutive_windows(ids[half:], args.seqlen, args.calib_windows)


def _protocol(args) -> dict:
    return {"steps": args.steps, "n_random": args.n_random, "seed": args.seed, "alpha": args.alpha}


def _finish(args, result, method: str) -> int:
    result.method = method
    _write(args, result, _inputs(args))
    rho = result.extras.get("one_removed", {}).get("spearman")
    emit(args, result.to_dict(), str(result) + (f"; Spearman with each unit's one-removed change {rho:+.3f}"
                                                if rho is not None else "") + (f" -> {args.out}" if args.out else ""))
    return 0


def _cmd_layers(args) -> int:
    from salience.core.base import create

    given_scores = (read_score_list(args.scores, "salience compress layers", "layer") if args.scores is not None
                    else None)
    model, scoring, held_out = _model_and_halves(args)
    if given_scores is None:
        scores, method = create("layers", args.method).score(model, scoring), args.method
    else:
        scores, method = given_scores
        if len(scores) != model.config.num_hidden_layers:
            raise InputFormatError(f"{args.scores} scores {len(scores)} layers but {args.model} has "
                                   f"{model.config.num_hidden_layers}: give the model the scores were computed on "
                                   "(compress layers' input, not its output).")
    verifier = create("verify", "layers", max_fraction=args.max_fraction, **_protocol(args))
    return _finish(args, verifier.verify(scores, model=model, windows=held_out), method)


def _cmd_structures(args) -> int:
    from salience.core.base import create

    model, scoring, held_out = _model_and_halves(args)
    scores = create("structure", args.method, unit=args.structure).score(model, scoring)
    verifier = create("verify", "structures", structure=args.structure, max_fraction=args.max_fraction,
                      **_protocol(args))
    return _finish(args, verifier.verify(scores, model=model, windows=held_out), f"{args.structure}/{args.method}")


def _cmd_weights(args) -> int:
    from salience.compress.weights import weight_scores
    from salience.core.base import create

    model, scoring, held_out = _model_and_halves(args)
    scores = weight_scores(model, args.module, method=args.method, calibration=scoring)
    verifier = create("verify", "weights", max_fraction=args.max_fraction, **_protocol(args))
    return _finish(args, verifier.verify(scores, model=model, windows=held_out), args.method)


def _read_passages(path: str, on_error: str) -> tuple[str | None, dict, dict]:
    """(query, id -> text, id -> score) of ``salience search query INDEX Q --json``'s output (one
    object with ``query`` and ``results``), or of a jsonl of ``{id, text, score}`` lines."""
    from salience.io.files import iter_jsonl

    text = Path(path).read_text(encoding="utf-8", errors="strict") if path.endswith(".json") else None
    if text is not None:
        try:
            data = json.loads(text)
        except ValueError as err:
            raise InputFormatError(f"{path}: not JSON ({err}).") from None
        if not isinstance(data, dict) or not isinstance(data.get("results"), list):
            raise InputFormatError(f"{path}: not salience search query --json's output (an object with results).")
        query, rows = data.get("query"), list(enumerate(data["results"], start=1))
    else:
        query, rows = None, list(iter_jsonl(path, on_error))
    passages, scores = {}, {}
    for lineno, row in rows:
        if not isinstance(row, dict) or "id" not in row or not isinstance(row.get("score"), (int, float)):
            raise InputFormatError(f"{path}: result {lineno} has no id or no numeric score.")
        body = " ".join(part for part in (row.get("title") or "", row.get("text") or "") if part).strip()
        if not body:
            raise InputFormatError(f"{path}: result {lineno} (id {row['id']!r}) has no text: index with stored "
                                   "documents, or give {id, text, score} lines.")
        passages[str(row["id"])] = body
        scores[str(row["id"])] = float(row["score"])
    if not passages:
        raise InputFormatError(f"{path}: no passages.")
    return query, passages, scores


def _cmd_passages(args) -> int:
    from salience.core.base import create
    from salience.io.files import check_output_path

    _check_protocol(args)
    if args.out is not None:
        check_output_path(args.out, [args.results], what="report", is_own=_is_own_report)
    query, passages, scores = _read_passages(args.results, args.on_error)
    question = args.question or query
    if not question:
        raise InvalidParameterError(f"{args.results} names no query: pass --question.")
    from salience.cli.compress import _load

    model, tokenizer = _load(args)
    verifier = create("verify", "passages", max_new_tokens=args.max_new_tokens, steps=args.steps,
                      n_random=args.n_random, seed=args.seed, alpha=args.alpha)
    result = verifier.verify(scores, passages=passages, question=question, model=model, tokenizer=tokenizer,
                             response=args.response)
    result.method = args.results
    _write(args, result, [args.results])
    drops = ", ".join(f"top-{k} {v:+.3f}" for k, v in result.extras["top_k_drop"].items())
    emit(args, result.to_dict(), f"answer: {result.extras['response']}\n{result}\nlog-probability drop: {drops}"
         + (f" -> {args.out}" if args.out else ""))
    return 0


def _cmd_kv(args) -> int:
    import numpy as np

    from salience.cli.compress import _load, _text_of, _token_ids
    from salience.compress import policy_token_scores
    from salience.core.base import create
    from salience.io.files import check_output_path

    _check_protocol(args)
    if args.out is not None:
        check_output_path(args.out, [args.text], what="report", is_own=_is_own_report)
    text = _text_of(args.text, args.on_error)
    model, tokenizer = _load(args)
    ids = np.asarray(_token_ids(tokenizer, text), dtype=np.int64)
    if len(ids) < args.context + args.continuation:
        raise InvalidParameterError(f"{args.text} holds {len(ids)} tokens: --context {args.context} and --continuation "
                                    f"{args.continuation} need {args.context + args.continuation}.")
    context, continuation = ids[: args.context], ids[args.context : args.context + args.continuation]
    scores = policy_token_scores(model, args.policy, context)
    verifier = create("verify", "kv", max_fraction=args.max_fraction, steps=args.steps, n_random=args.n_random,
                      seed=args.seed, alpha=args.alpha)
    result = verifier.verify(scores, model=model, context_ids=context, continuation_ids=continuation)
    result.method = args.policy
    _write(args, result, [args.text])
    emit(args, result.to_dict(), str(result) + (f" -> {args.out}" if args.out else ""))
    return 0


def add_model_commands(commands) -> None:
    p = commands.add_parser("passages", help="passages: an LM's answer's log-probability as the top-scored passages "
                                             "leave its context (ContextCite's top-k drop), against random orders")
    p.add_argument("results", help="salience search query INDEX Q --json's output (.json), or jsonl of {id, text, "
                                   "score}")
    p.add_argument("--model", required=True, help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
    p.add_argument("--question", default=None, help="the question (default: the results' query)")
    p.add_argument("--response", default=None, help="the answer measured (default: the model's greedy answer)")
    p.add_argument("--max-new-tokens", type=positive_int, default=64, help="of a generated answer (default 64)")
    _add_protocol_options(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_passages)

    def add_model_options(p, what: str) -> None:
        p.add_argument("model", help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
        p.add_argument("--calib", required=True,
                       help=f"a text: its first half scores the {what}, its second half is held out to verify them")
        p.add_argument("--calib-windows", type=positive_int, default=8, help="windows of each half (default 8)")
        p.add_argument("--seqlen", type=positive_int, default=256, help="tokens per window (default 256)")
        p.add_argument("--max-fraction", type=float, default=0.5,
                       help=f"the largest share of {what} removed (default 0.5)")
        _add_protocol_options(p)
        add_on_error(p)
        add_output_options(p)

    p = commands.add_parser("layers", help="decoder layer importance: held-out perplexity as the top-scored layers "
                                           "are removed, against random orders")
    p.add_argument("--method", default="block_influence", choices=choices_of("layers"),
                   help="the layer importance verified (default block_influence)")
    p.add_argument("--scores", default=None,
                   help="the scores verified instead of --method's: salience compress layers' report (its --json "
                        "output, or salience-prune.json in its --out folder); its --calib should not be this one's "
                        "held-out half")
    add_model_options(p, "layers")
    p.set_defaults(func=_cmd_layers)

    p = commands.add_parser("structures", help="FFN channel or attention head importance: held-out perplexity as the "
                                               "top-scored units stop writing, against random orders")
    p.add_argument("--structure", default="attention_heads", choices=_structure_units(),
                   help="the units (default attention_heads)")
    p.add_argument("--method", default="magnitude", choices=choices_of("structure"),
                   help="the criterion verified (default magnitude)")
    add_model_options(p, "units")
    p.set_defaults(func=_cmd_structures)

    p = commands.add_parser("weights", help="weight importance: held-out perplexity as the top-scored weights of some "
                                            "linear layers are zeroed, against random orders")
    p.add_argument("--method", default="wanda", choices=choices_of("weights"),
                   help="the weights criterion verified (default wanda)")
    p.add_argument("--module", action="append", required=True,
                   help="a decoder linear layer whose weights are verified (e.g. model.layers.3.mlp.down_proj); "
                        "repeat for more")
    add_model_options(p, "weights")
    p.set_defaults(func=_cmd_weights)

    p = commands.add_parser("kv", help="KV-cache token importance: a continuation's NLL as a policy's top-scored "
                                       "context tokens are evicted, against random orders")
    p.add_argument("model", help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
    p.add_argument("--text", required=True, help="a text: its first --context tokens are cached, the next "
                                                 "--continuation read after them")
    p.add_argument("--policy", default="snapkv", choices=choices_of("kv"),
                   help="the kv policy whose token scores (ranks within each head, averaged) are verified "
                        "(default snapkv)")
    p.add_argument("--context", type=positive_int, default=256, help="context tokens (default 256)")
    p.add_argument("--continuation", type=positive_int, default=64, help="continuation tokens (default 64)")
    p.add_argument("--max-fraction", type=float, default=0.9, help="the largest share of the context evicted "
                                                                   "(default 0.9)")
    _add_protocol_options(p)
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_kv)
