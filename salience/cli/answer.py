"""``salience search answer INDEX "question" --model M``: the answer path (:mod:`salience.answer`)
from the shell: retrieve, rerank, pack, sort, compress the KV cache, generate, cite, verify."""

from __future__ import annotations

from salience.cli._common import add_output_options, choices_of, emit, positive_int
from salience.cli.params import add_param_option, role_params
from salience.exceptions import InvalidParameterError


def _cmd_answer(args) -> int:
    from salience.answer import answer
    from salience.cli.search_engines import load_index
    from salience.models.lm import load_causal_lm

    if args.kv_budget is not None and args.kv_policy is None:
        raise InvalidParameterError("--kv-budget needs --kv-policy (the policy that evicts down to it).")
    cite = None if args.cite == "none" else args.cite
    params = role_params(args, {"rerank": ("judge", args.rerank), "kv_policy": ("kv", args.kv_policy),
                                "cite": ("context", cite)}, {"max_new_tokens": "--max-new-tokens"})
    index = load_index(args.index)
    if not getattr(index, "store_documents", True):
        raise InvalidParameterError(f"{args.index} stores no documents: the model reads their texts (index with stored "
                                    "documents).")
    model, tokenizer = load_causal_lm(args.model, dtype=args.dtype)
    result = answer(index, args.question, model=model, tokenizer=tokenizer, k=args.k, rerank=args.rerank,
                    budget=args.budget, pack_method=args.pack_method, sort=args.sort, sort_rounds=args.sort_rounds,
                    kv_policy=args.kv_policy, kv_budget=args.kv_budget,
                    cite=cite, citations=args.citations, sentences=args.sentences,
                    max_new_tokens=args.max_new_tokens, lookup_tokens=args.lookup_tokens,
                    random_draws=args.random_draws, seed=args.seed,
                    params={role: values for role, values in params.items() if values})
    emit(args, result.to_dict(), str(result))
    return 0


def add_commands(commands) -> None:
    from salience.answer import ANSWER_OPTIONS, SORTS, packers_without_similarity
    from salience.models.lm import LM_DTYPES

    d = ANSWER_OPTIONS
    p = commands.add_parser("answer", help="answer a question from an index's passages with a causal LM, citing the "
                                           "passages the answer came from and verifying the citations")
    p.add_argument("index", help="index folder with stored documents (salience search index)")
    p.add_argument("question", help="the question")
    p.add_argument("--model", required=True, help="causal LM: a transformers folder, a .gguf file, or 'smollm2'")
    p.add_argument("--dtype", default=None, choices=LM_DTYPES,
                   help="the model's weights (default: as stored; bfloat16 is several times faster on a CPU with AMX, "
                        "its answers and scores differ a little from float32's)")
    p.add_argument("-k", type=positive_int, default=d["k"], help=f"passages retrieved (default {d['k']})")
    p.add_argument("--rerank", default=None, choices=choices_of("judge"),
                   help="a judge reorders the retrieved passages (an LM judge asks --model)")
    p.add_argument("--budget", type=positive_int, default=None,
                   help="the passages' tokens (the model's) packed into this many (default: all k read; a prompt past "
                        "the model's window is refused)")
    p.add_argument("--pack-method", default=d["pack_method"], choices=packers_without_similarity(),
                   help=f"how passages are packed into --budget (default {d['pack_method']})")
    p.add_argument("--sort", default=None, choices=SORTS,
                   help="attention sorting: the passage the question reads most is put next to it")
    p.add_argument("--sort-rounds", type=positive_int, default=d["sort_rounds"], help="rounds of --sort (default 1)")
    p.add_argument("--kv-policy", default=None, choices=choices_of("kv"),
                   help="evict the prompt's KV cache by this policy before answering")
    p.add_argument("--kv-budget", type=float, default=None,
                   help="what --kv-policy keeps: a fraction in (0, 1] or a token count (as compress kv-eval --budget)")
    p.add_argument("--cite", default=d["cite"], choices=(*choices_of("context"), "none"),
                   help=f"the context attribution the citations come from (default {d['cite']}; none: no citations)")
    p.add_argument("--citations", type=positive_int, default=d["citations"],
                   help=f"passages cited at most: those with a positive score (default {d['citations']})")
    p.add_argument("--sentences", type=positive_int, default=d["sentences"],
                   help=f"sentences highlighted in each cited passage (default {d['sentences']})")
    p.add_argument("--max-new-tokens", type=positive_int, default=d["max_new_tokens"],
                   help=f"of the answer (default {d['max_new_tokens']})")
    p.add_argument("--lookup-tokens", type=int, default=d["lookup_tokens"],
                   help="prompt lookup decoding: tokens copied from the passages checked in the same pass as the next "
                        f"one (0: plain greedy; default {d['lookup_tokens']})")
    p.add_argument("--random-draws", type=int, default=d["random_draws"],
                   help=f"random passage sets whose drop is set beside the citations' (default {d['random_draws']})")
    p.add_argument("--seed", type=int, default=d["seed"], help="seed of the random draws (default 0)")
    add_param_option(p, "--rerank's judge, --kv-policy or --cite (rerank.NAME=VALUE, kv_policy.NAME=VALUE or "
                        "cite.NAME=VALUE when two of them have NAME)")
    add_output_options(p)
    p.set_defaults(func=_cmd_answer)
