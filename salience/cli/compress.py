"""``salience compress``: prune a causal language model by weight importance, measure its perplexity."""

from __future__ import annotations

import json
from pathlib import Path

from salience.cli._common import (add_on_error, add_output_options, choices_of, emit, given, method_option,
                                  nonnegative_int, positive_int, read_text)
from salience.cli.params import add_param_option, method_params, role_params
from salience.exceptions import InvalidParameterError
from salience.io.files import atomic_directory, check_output_path
from salience.models.folders import owns_model_file


def _text_of(path: str, on_error: str) -> str:
    """A calibration or evaluation text, read (and refused when empty) before any model loads."""
    text = read_text(path, on_error)
    if not text.strip():
        raise InvalidParameterError(f"{path} holds no text.")
    return text


def _token_ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _load(args):
    """The model and tokenizer, after the checks that need no model: torch is there (named for
    compression), the model path exists."""
    from salience.models.lm import load_causal_lm
    from salience.extras import require_torch

    require_torch("Compression")
    return load_causal_lm(args.model)


def _is_pruned_model(path: Path) -> bool:
    """An existing folder is this command's earlier output when it holds its report."""
    return path.is_dir() and ((path / "salience-prune.json").is_file() or (path / "salience-quantize.json").is_file())


def _model_and_calibration(args, check_options):
    """(model, tokenizer, calibration windows or None) for a command that writes a model to
    ``--out``. Everything that needs no model is checked before the model loads (seconds): the
    output path (never an input, never a folder this command did not write), the options
    (``check_options()``) and the calibration text; then the model is loaded and ``--calib``
    cut into windows."""
    from salience.compress import calibration_windows

    from salience.models.quantized_files import is_quantized_folder

    check_output_path(args.out, [args.model, args.calib] if args.calib else [args.model], what="model",
                      is_own=_is_pruned_model)
    if is_quantized_folder(args.model):
        raise InvalidParameterError(f"{args.model} is already quantized (integer weights in the compressed-tensors "
                                    f"format): compress {args.command} changes float weights; give it the model that "
                                    "one was made from.")
    check_options()
    text = _text_of(args.calib, args.on_error) if args.calib else None
    model, tokenizer = _load(args)
    windows = None
    if text is not None:
        windows = calibration_windows(_token_ids(tokenizer, text), seqlen=args.seqlen, n_samples=args.calib_windows,
                                      seed=args.seed)
    return model, tokenizer, windows


def _write_model(args, model, tokenizer, result: dict) -> None:
    """The changed model, its tokenizer and the command's report, written atomically to --out
    (``--compressed``: the pruned layers' zeros left out of the files)."""
    with atomic_directory(args.out, owned=owns_model_file) as folder:  # the user's files there stay
        if getattr(args, "compressed", False):
            from salience.models.sparse_files import save_sparse

            result["storage"] = save_sparse(model, folder, tokenizer=tokenizer,
                                            structure="2:4" if args.pattern == "2:4" else "unstructured")
        else:
            model.save_pretrained(folder)
            tokenizer.save_pretrained(folder)
        (folder / "salience-prune.json").write_text(json.dumps(result, indent=1), encoding="utf-8")


def _cmd_prune(args) -> int:
    from salience.compress import prune
    from salience.compress.weights import check_prune_options

    params = given(args, "blocksize", "damp") | method_params(args, "weights", args.method)
    model, tokenizer, windows = _model_and_calibration(args, lambda: check_prune_options(
        args.method, None if args.pattern else args.sparsity, args.pattern, args.group, bool(args.calib), **params))
    report = prune(model, method=args.method, sparsity=None if args.pattern else args.sparsity, pattern=args.pattern,
                   group=args.group, calibration=windows, sequential=args.sequential, **params)
    result = {"method": report.method, "pattern": report.pattern, "group": report.group, "sparsity": report.sparsity,
              "seconds": report.seconds, "layers": report.layers, "out": args.out}
    _write_model(args, model, tokenizer, result)
    emit(args, result, report.table() + f"\n-> {args.out}")
    return 0


def _cmd_quantize(args) -> int:
    from salience.compress import quantize
    from salience.compress.quantize import check_quantize_options
    from salience.compress.precision import check_bit_budget
    from salience.models.quantized_files import save_quantized

    group = ... if args.group is None else (None if args.group == 0 else args.group)
    params = given(args, "blocksize", "damp", "n_grid") | method_params(args, "quantizers", args.method)

    def check_options() -> None:
        _, scheme = check_quantize_options(args.method, args.scheme, group_size=group, symmetric=args.symmetric,
                                           has_calibration=bool(args.calib), outliers=args.outliers,
                                           outlier_criterion=args.outlier_criterion, **params)
        if args.bits_budget is not None:
            check_bit_budget(args.bits_budget, scheme.bits, args.high_bits)
            if args.criterion != "magnitude" and not args.calib:
                raise InvalidParameterError(f"--criterion {args.criterion} needs --calib.")

    model, tokenizer, windows = _model_and_calibration(args, check_options)
    report = quantize(model, method=args.method, scheme=args.scheme, group_size=group, symmetric=args.symmetric,
                      calibration=windows, bit_budget=args.bits_budget, criterion=args.criterion,
                      high_bits=args.high_bits, ragged=args.ragged_groups, embeddings=args.embeddings == "int8",
                      outliers=args.outliers, outlier_criterion=args.outlier_criterion, **params)
    result = {**report.as_dict(), "out": args.out}
    with atomic_directory(args.out, owned=owns_model_file) as folder:
        save_quantized(model, folder, tokenizer=tokenizer)
        (folder / "salience-quantize.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    size = sum(p.stat().st_size for p in Path(args.out).glob("*.safetensors"))
    result["bytes"] = size
    emit(args, result, report.table() + f"\n{size / 1e6:.1f} MB -> {args.out}")
    return 0


def _cmd_layers(args) -> int:
    from salience.compress import drop_least_important
    from salience.core.base import create

    params = method_params(args, "layers", args.method)

    def check_options() -> None:
        if args.remove < 1:
            raise InvalidParameterError(f"--remove must be a positive number of layers; got {args.remove}.")
        create("layers", args.method, **params)

    model, tokenizer, windows = _model_and_calibration(args, check_options)
    removed, scores = drop_least_important(model, args.remove, windows, method=args.method, **params)
    result = {"method": args.method, "removed": removed, "layers_left": model.config.num_hidden_layers,
              "scores": scores.values.round(6).tolist(), "out": args.out}
    _write_model(args, model, tokenizer, result)
    emit(args, result, f"removed layers {removed} by {args.method}; {model.config.num_hidden_layers} left -> {args.out}")
    return 0


def _cmd_structured(args) -> int:
    from salience.compress import remove_structures

    from salience.compress.structured import check_structure_options

    params = method_params(args, "structure", args.criterion)
    model, tokenizer, windows = _model_and_calibration(args, lambda: check_structure_options(
        args.unit, args.criterion, args.fraction, None, bool(args.calib), **params))
    report = remove_structures(model, args.unit, fraction=args.fraction, criterion=args.criterion,
                               calibration=windows, **params)
    result = {**report.as_dict(), "out": args.out}
    _write_model(args, model, tokenizer, result)
    emit(args, result, f"removed {report.units_before - report.units_after} of {report.units_before} {args.unit} per "
                       f"layer by {args.criterion}: {report.parameters_before:,} -> {report.parameters_after:,} "
                       f"parameters -> {args.out}")
    return 0


def _cmd_eval(args) -> int:
    from salience.compress import perplexity, sparsity_of
    text = _text_of(args.data, args.on_error)
    model, tokenizer = _load(args)
    tokens = _token_ids(tokenizer, text)
    value = perplexity(model, tokens, seqlen=args.seqlen, max_windows=args.windows)
    import torch

    dense = any(isinstance(m, torch.nn.Linear) for name, m in model.named_modules() if ".layers." in f".{name}")
    result = {"model": args.model, "perplexity": value, "seqlen": args.seqlen,
              "sparsity": sparsity_of(model) if dense else None}
    emit(args, result, f"perplexity {value:.3f} (windows of {args.seqlen} tokens"
                       + (f"; sparsity {result['sparsity']:.3f})" if dense else "; integer weights)"))
    return 0


def _learner(policy):
    """The policy (or the press a wrapper uses) that learns from the model, or None."""
    inner = getattr(policy, "_inner", policy)
    return inner if getattr(inner, "learned", None) else None


def _cmd_kv_eval(args) -> int:
    from salience.compress.kv.eviction import check_budget, kv_policy
    from salience.compress.kv.evaluation import kv_eval, passkey

    budget = None if args.policy == "full" else (0.25 if args.budget is None else args.budget)
    policy = None
    by_role = role_params(args, {
        "policy": ("kv", None if args.policy == "full" else args.policy), "press": ("kv", args.press),
        "prefill": ("kv", args.prefill_policy), "layer_importance": ("layers", args.layer_importance),
        "channel_policy": ("kv_channels", args.channel_policy if args.key_channels is not None else None)})
    if args.needles < 0:
        raise InvalidParameterError(f"--needles takes a count >= 0; got {args.needles}.")
    if args.query_aware and not args.needles:
        raise InvalidParameterError("--query-aware applies to passkey retrieval: give --needles N too.")
    if (args.policy == "layer_budget") != bool(args.layer_importance):
        raise InvalidParameterError("--layer-importance goes with --policy layer_budget, which needs it (and --calib).")
    if args.layer_importance and not args.calib:
        raise InvalidParameterError(f"--layer-importance {args.layer_importance} needs --calib (a calibration text).")
    # the outer policy's own options (a wrapper's go to it, not to --press)
    wrapper = {name: value for name, value in {
        "floor": args.floor, "compression_interval": args.compression_interval, "prefill": args.prefill_policy,
        "threshold": args.threshold, "sliding_window_size": args.sliding_window,
        "decoding": True if args.decode else None}.items() if value is not None}
    if args.floor is not None and args.policy != "layer_budget":
        raise InvalidParameterError("--floor applies to --policy layer_budget.")
    if args.policy != "full":  # checked before the model loads
        params = {k: v for k, v in {"n_sink": args.sinks, "window": args.observation_window}.items() if v is not None}
        if args.streaming:
            params.update(sink_size=args.streaming[0], recent_size=args.streaming[1])
        if by_role["prefill"]:
            wrapper["prefill"] = kv_policy(args.prefill_policy, **by_role["prefill"])
        if args.press:  # the wrapping policies: the options go to the policy they wrap
            policy = kv_policy(args.policy, press=kv_policy(args.press, **params | by_role["press"]),
                               **wrapper | by_role["policy"])
        else:
            policy = kv_policy(args.policy, **params | wrapper | by_role["policy"])
        if args.question_tokens >= args.context:
            raise InvalidParameterError(f"--question-tokens ({args.question_tokens}) must leave context tokens to "
                                        f"compress (--context {args.context}).")
        if not policy.needs.budgeted and args.budget is None:  # dms: as many as its threshold leaves
            budget = None
        check_budget(budget, args.context - args.question_tokens, policy)
        if policy.needs.question and not (args.question_tokens and (args.query_aware or not args.needles)):
            raise InvalidParameterError(f"--policy {args.policy} scores with the question's queries: give "
                                        "--question-tokens N (the windows' last N tokens read as their question)"
                                        + (" and --query-aware (passkey)" if args.needles else "") + ".")
        if _learner(policy) is not None and not args.calib:
            raise InvalidParameterError(f"--policy {_learner(policy).name} learns its {_learner(policy).learned} from "
                                        "the model: give --calib (a calibration text).")
    if args.calib and not args.layer_importance and (policy is None or _learner(policy) is None):
        raise InvalidParameterError("--calib is read by --layer-importance and by the policies that learn from the "
                                    "model (qfilter, duo_attention); this command would ignore it.")
    if args.key_channels is not None:
        from salience.compress.kv.channels import check_key_channels

        check_key_channels(args.key_channels)
    channels = {"key_channels": args.key_channels, "channel_policy": args.channel_policy}
    if by_role["channel_policy"]:
        from salience.compress.kv.channels import key_channel_policy

        channels["channel_policy"] = key_channel_policy(args.channel_policy, **by_role["channel_policy"])
    text = _text_of(args.data, args.on_error)
    calib = _text_of(args.calib, args.on_error) if args.calib else None
    model, tokenizer = _load(args)
    tokens = _token_ids(tokenizer, text)
    if policy is not None and "tokenizer" in policy.get_params():  # kvzip prompts the model to repeat its context
        policy = policy.set_params(tokenizer=tokenizer)
    if args.layer_importance:  # each layer's share of the budget, from the calibration text
        from salience.compress import calibration_windows
        from salience.core.base import create

        windows = calibration_windows(_token_ids(tokenizer, calib), seqlen=args.seqlen, n_samples=args.calib_windows,
                                      seed=args.seed)
        importance = create("layers", args.layer_importance, **by_role["layer_importance"]).score(model, windows)
        policy = policy.set_params(importance=importance.values)
    if policy is not None and _learner(policy) is not None:  # Q-Filters, DuoAttention: learned from --calib
        from salience.compress import calibration_windows

        windows = calibration_windows(_token_ids(tokenizer, calib), seqlen=args.seqlen, n_samples=args.calib_windows,
                                      seed=args.seed)
        learned = _learner(policy).calibrate(model, windows)
        policy = learned if learned.name == policy.name else policy.set_params(press=learned)
    report = kv_eval(model, tokens, policy=policy, budget=budget, context=args.context,
                     continuation=args.continuation, max_windows=args.windows, keep_last=args.question_tokens,
                     **channels)
    result = {"model": args.model, **report.as_dict()}
    if args.layer_importance:
        result["layer_importance"] = {"method": args.layer_importance, "scores": [float(x) for x in importance.values],
                                      "tokens_per_layer": policy.layer_budgets(report.kept, args.context,
                                                                               len(importance.values)).tolist()}
    at = (f"budget {budget}" if budget is not None
          else "its threshold" if policy is not None and not policy.needs.budgeted else "budget 1.0")
    text = (f"{args.policy} at {at}: continuation perplexity "
            f"{report.perplexity:.3f} over {report.windows} windows ({report.context} context tokens, "
            f"{report.kept} kept per head; {report.continuation} continuation tokens)"
            + (f"; {args.key_channels:.0%} of the key channels kept ({args.channel_policy})" if args.key_channels
               else ""))
    if args.needles:
        key = passkey(model, tokenizer, policy=policy, budget=budget, needles=args.needles, context=args.context,
                      query_aware=args.query_aware, **channels)
        result["passkey"] = {**key.as_dict(), "query_aware": args.query_aware}
        text += (f"\npasskey{' (query-aware)' if args.query_aware else ''}: NLL {key.nll:.3f}, mean rank "
                 f"{key.rank:.2f}, exact {key.accuracy:.0%} over "
                 f"{key.needles} needles")
    emit(args, result, text)
    return 0


def add_commands(domains) -> None:
    from salience.compress.quant_grid import SCHEMES
    from salience.compress.structured import STRUCTURE_UNITS

    compress = domains.add_parser("compress", help="prune a language model by importance; measure it")
    commands = compress.add_subparsers(dest="command", required=True)

    p = commands.add_parser("prune", help="zero the least important weights of the decoder's linear layers")
    p.add_argument("model", help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
    method_option(p, "--method", "weights", "wanda", "weight importance")
    p.add_argument("--blocksize", type=positive_int, default=None, help="sparsegpt's column block (default 128)")
    p.add_argument("--damp", type=float, default=None, help="sparsegpt's Hessian dampening (default 0.01)")
    add_param_option(p, "the weight criterion")
    p.add_argument("--sparsity", type=float, default=0.5, help="fraction of weights removed, in [0, 1) (default 0.5)")
    p.add_argument("--pattern", default=None, help="N:M semi-structured sparsity, e.g. 2:4 (instead of --sparsity)")
    p.add_argument("--group", choices=("row", "layer", "global"), default=None,
                   help="comparison group (default: row for wanda/sparsegpt, layer for magnitude/taylor, global for "
                        "lamp)")
    p.add_argument("--calib", default=None, help="calibration text file (wanda, taylor, sparsegpt)")
    p.add_argument("--calib-windows", type=positive_int, default=32, help="calibration windows cut from --calib (default 32)")
    p.add_argument("--seqlen", type=positive_int, default=256, help="tokens per window (default 256)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the calibration windows (default 0)")
    p.add_argument("--sequential", action="store_true",
                   help="calibrate each decoder block on the outputs of the blocks already pruned")
    p.add_argument("--compressed", action="store_true",
                   help="save the pruned layers compressed (bitmask and nonzero values): the folder's true size")
    p.add_argument("--out", required=True, help="output model folder: new, or an earlier output (replaced atomically)")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_prune)

    p = commands.add_parser("quantize", help="put the decoder's linear layers on an integer grid and save integer "
                                             "files (compressed-tensors format)")
    p.add_argument("model", help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
    method_option(p, "--method", "quantizers", "gptq", "quantizer")
    p.add_argument("--scheme", choices=tuple(SCHEMES), default="w4a16",
                   help="weights (and activations) scheme; w4a16: 4-bit groups of 128 (default)")
    p.add_argument("--group", type=nonnegative_int, default=None,
                   help="columns sharing a scale (0: one scale per row; default: the scheme's, halved until it "
                        "divides every layer's width, e.g. 64 for SmolLM2's 576)")
    p.add_argument("--asym", dest="symmetric", action="store_const", const=False, default=None,
                   help="asymmetric grid (a zero point per group)")
    p.add_argument("--ragged-groups", action="store_true",
                   help="allow a group size that does not divide a layer's width (its last group shorter)")
    p.add_argument("--bits-budget", type=float, default=None,
                   help="mixed precision: average bits per weight (e.g. 4.25); the most important layers get "
                        "--high-bits")
    method_option(p, "--criterion", "precision", "fisher", "layer importance for --bits-budget")
    p.add_argument("--high-bits", type=int, default=6, help="bits of the layers a budget upgrades (default 6, chosen on a dev split)")
    p.add_argument("--embeddings", choices=("float", "int8"), default="float",
                   help="store the token embeddings (and a tied output head) as 8-bit rows (default float)")
    p.add_argument("--outliers", type=float, default=0.0,
                   help="share of each layer's weights kept in float16, the most important (outlier-aware; e.g. "
                        "0.005; rtn and gptq)")
    method_option(p, "--outlier-criterion", "weights", "wanda", "weight importance choosing --outliers")
    p.add_argument("--blocksize", type=positive_int, default=None, help="gptq's column block (default 128)")
    p.add_argument("--damp", type=float, default=None, help="gptq's Hessian dampening (default 0.01)")
    p.add_argument("--n-grid", type=positive_int, default=None, help="awq's scale exponents searched (default 20)")
    add_param_option(p, "the quantizer")
    p.add_argument("--calib", default=None, help="calibration text file (gptq, awq, --bits-budget)")
    p.add_argument("--calib-windows", type=positive_int, default=32, help="calibration windows cut from --calib (default 32)")
    p.add_argument("--seqlen", type=positive_int, default=256, help="tokens per window (default 256)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the calibration windows (default 0)")
    p.add_argument("--out", required=True, help="output model folder: new, or an earlier output (replaced atomically)")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_quantize)

    p = commands.add_parser("layers", help="remove the least important decoder layers (physically)")
    p.add_argument("model", help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
    p.add_argument("--remove", type=int, required=True, help="how many decoder layers to remove")
    method_option(p, "--method", "layers", "block_influence", "layer importance")
    add_param_option(p, "the layer importance")
    p.add_argument("--calib", required=True, help="calibration text file")
    p.add_argument("--calib-windows", type=positive_int, default=16, help="calibration windows cut from --calib (default 16)")
    p.add_argument("--seqlen", type=positive_int, default=256, help="tokens per window (default 256)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the calibration windows (default 0)")
    p.add_argument("--out", required=True, help="output model folder: new, or an earlier output (replaced atomically)")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_layers)

    p = commands.add_parser("structured", help="remove the least important FFN channels or attention heads "
                                                "(physically)")
    p.add_argument("model", help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
    p.add_argument("--unit", choices=STRUCTURE_UNITS, default="ffn_channels", help="structure unit removed")
    p.add_argument("--fraction", type=float, required=True, help="fraction of each layer's units removed, in [0, 1)")
    method_option(p, "--criterion", "structure", "magnitude",
                  "unit importance: weight norm, Taylor (LLM-Pruner) or output magnitude (2SSP); the last two need "
                  "--calib")
    add_param_option(p, "the structure criterion")
    p.add_argument("--calib", default=None, help="calibration text file (taylor, output)")
    p.add_argument("--calib-windows", type=positive_int, default=16, help="calibration windows cut from --calib (default 16)")
    p.add_argument("--seqlen", type=positive_int, default=256, help="tokens per window (default 256)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the calibration windows (default 0)")
    p.add_argument("--out", required=True, help="output model folder: new, or an earlier output (replaced atomically)")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_structured)

    p = commands.add_parser("kv-eval", help="continuation perplexity (and passkey retrieval) with an evicted KV cache")
    p.add_argument("model", help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
    p.add_argument("--policy", choices=("full",) + choices_of("kv"), required=True,
                   help="which cached tokens to keep ('full': no eviction, the reference)")
    p.add_argument("--budget", type=float, default=None,
                   help="tokens kept per head: a fraction in (0, 1] of the context, or a count > 1 (default 0.25; "
                        "decoding, cam: a share of every token seen, or a count; dms takes none)")
    p.add_argument("--data", required=True, help="evaluation text file")
    p.add_argument("--context", type=positive_int, default=768, help="context tokens per window (default 768)")
    p.add_argument("--continuation", type=positive_int, default=256,
                   help="continuation tokens scored per window (default 256)")
    p.add_argument("--windows", type=positive_int, default=8, help="at most this many windows (default 8)")
    p.add_argument("--sinks", type=nonnegative_int, default=None,
                   help="sink tokens of streaming_llm, lagkv and expected_attention (default 4)")
    p.add_argument("--observation-window", type=positive_int, default=None,
                   help="observation window of snapkv, caote and pyramidkv (default 64)")
    p.add_argument("--streaming", type=nonnegative_int, nargs=2, default=None, metavar=("SINK", "RECENT"),
                   help="duo_attention: the sinks and recent tokens a streaming head keeps (default 128 256)")
    p.add_argument("--press", choices=choices_of("kv"), default=None,
                   help="adakv, criticalkv, chunkkv, entropy_chunkkv, block, layer_budget, rerotate, merging, "
                        "decoding, cam, dms: the policy whose scores they use (default snapkv; block: keydiff; "
                        "rerotate: streaming_llm; decoding, cam, dms: key_norm); --sinks and --observation-window "
                        "then go to it")
    p.add_argument("--compression-interval", type=positive_int, default=None,
                   help="decoding, cam: cut the cache back every N decoded tokens (default 512)")
    p.add_argument("--prefill-policy", choices=choices_of("kv"), default=None,
                   help="decoding, cam: a policy that also evicts the prompt to the budget (default: kept whole)")
    p.add_argument("--threshold", type=float, default=None,
                   help="dms: tokens scored below this (on --press's scale) leave once out of the sliding window")
    p.add_argument("--sliding-window", type=nonnegative_int, default=None,
                   help="dms: the recent tokens never evicted (default 128)")
    p.add_argument("--decode", action="store_true",
                   help="dms: evict while decoding too (default: the prompt only)")
    p.add_argument("--layer-importance", choices=choices_of("layers"), default=None,
                   help="layer_budget: the layer importance that shares the budget among layers, measured on --calib")
    p.add_argument("--floor", type=float, default=None,
                   help="layer_budget: the share of the uniform budget every layer keeps (default 0.5)")
    p.add_argument("--calib", default=None,
                   help="calibration text file (--layer-importance; qfilter and duo_attention learn from it)")
    p.add_argument("--calib-windows", type=positive_int, default=16, help="calibration windows cut from --calib (default 16)")
    p.add_argument("--seqlen", type=positive_int, default=256, help="tokens per calibration window (default 256)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the calibration windows (default 0)")
    p.add_argument("--key-channels", type=float, default=None,
                   help="share of key channels kept in every head, in (0, 1]; the others zeroed (with any --policy, "
                        "'full' included)")
    p.add_argument("--channel-policy", choices=choices_of("kv_channels"), default="think",
                   help="which key channels stay under --key-channels (default think)")
    p.add_argument("--question-tokens", type=nonnegative_int, default=0,
                   help="each window's last N context tokens read as its question: scored with the rest, never "
                        "evicted, outside the budget (finch needs a question; default 0)")
    p.add_argument("--needles", type=int, default=0, help="also run passkey retrieval with this many needles")
    add_param_option(p, "the policy, --press, --prefill-policy, --layer-importance or --channel-policy (ROLE.NAME=VALUE, "
                        "e.g. press.window=32, when two of them have NAME)")
    p.add_argument("--query-aware", action="store_true",
                   help="passkey: compress the cache with the question known (prefilled with the haystack)")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_kv_eval)

    p = commands.add_parser("eval", help="perplexity on fixed, non-overlapping windows of a text file")
    p.add_argument("model", help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
    p.add_argument("--data", required=True, help="evaluation text file")
    p.add_argument("--seqlen", type=positive_int, default=256, help="tokens per window (default 256)")
    p.add_argument("--windows", type=positive_int, default=None, help="at most this many windows (default all)")
    add_on_error(p)
    add_output_options(p)
    p.set_defaults(func=_cmd_eval)
