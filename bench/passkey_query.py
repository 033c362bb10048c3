"""KV-cache eviction with and without the question: passkey retrieval on SmolLM2-135M when the
cache is compressed before the question is known (query-agnostic: the haystack is prefilled
and evicted, then the question is read) and when it is compressed with the question read
(query-aware: haystack and question prefilled together, then evicted), for every registered
KV policy at one budget, in one process run.

``--needles`` 5-digit keys (seed 0) at evenly spread depths in ``--context`` tokens of
filler (``salience.compress.passkey``); exact retrieval: every key token the model's top
choice. Nothing here was tuned: the policies run at their defaults.

    python bench/passkey_query.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import run_benchmark  # noqa: E402


def run(args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from salience.compress.kv_eval import passkey
    from salience.core.base import method_names
    from salience.models.lm import load_causal_lm

    model, tokenizer = load_causal_lm("smollm2")
    rows = []
    from salience.core.base import method_factory

    policies = [None] + (args.policies or list(method_names("kv")))
    for policy in policies:
        # --window: the observation window of the policies that have one (chosen on another seed's needles)
        params = ({"window": args.window} if policy and args.window
                  and "window" in method_factory("kv", policy)._param_names() else {})
        for aware in (False, True) if not args.aware_only else (True,):
            if policy is None and aware:
                continue
            start = time.perf_counter()
            key = passkey(model, tokenizer, policy=policy, budget=args.budget if policy else None,
                          needles=args.needles, context=args.context, query_aware=aware, seed=args.seed, **params)
            label = (policy or "full cache") + (f" (window {params['window']})" if params else "")
            rows.append({"policy": label, "query_aware": aware, "accuracy": key.accuracy,
                         "nll": key.nll, "rank": key.rank, "seconds": time.perf_counter() - start})
            print(rows[-1], file=sys.stderr, flush=True)
    return {"rows": rows, "args": vars(args)}


def render(result: dict, command: str, seconds: float) -> str:
    a = result["args"]
    title = "KV-cache eviction with and without the question: passkey"
    if a.get("window"):
        title += f", observation window {a['window']}" + (" (dev: seed 1)" if a.get("seed") else "")
    lines = [f"## {title} (`bench/passkey_query.py`)", "",
             f"Command: `{command}`", "",
             f"SmolLM2-135M-Instruct, {a['needles']} needles (5-digit keys, seed {a['seed']}) at depths 0..1 in {a['context']} "
             f"tokens of filler, each policy at its defaults keeping {a['budget']:.0%} of the prompt per head. "
             "Query-agnostic: the haystack is evicted before the question is read; query-aware: the question is "
             "prefilled with the haystack, so policies that read queries (SnapKV's and CAOTE's observation window, "
             "TOVA's last query, H2O's and VATP's received attention, Expected Attention's query statistics) choose "
             "with it; the question's own tokens are never evicted and the budget applies to the haystack, as "
             "kvpress compresses the context and not the question, so both modes keep the same number of tokens. "
             "Exact: every key token the top choice. Target (issue 30): query-aware eviction at 25% recovers >= 90% "
             "exact retrieval. adakv and criticalkv wrap snapkv (their defaults).", "",
             "| policy | exact, agnostic | exact, query-aware | key NLL agnostic | key NLL aware | seconds (both) |",
             "|---|---:|---:|---:|---:|---:|"]
    by = {}
    for r in result["rows"]:
        by.setdefault(r["policy"], {})[r["query_aware"]] = r
    for policy, modes in by.items():
        agnostic, aware = modes.get(False), modes.get(True)
        if agnostic is None:  # query-aware only
            lines.append(f"| {policy} | | {aware['accuracy']:.0%} | | {aware['nll']:.3f} | {aware['seconds']:.0f} |")
            continue
        aware_exact = "" if aware is None else f"{aware['accuracy']:.0%}"
        aware_nll = "" if aware is None else f"{aware['nll']:.3f}"
        lines.append(f"| {policy} | {agnostic['accuracy']:.0%} | {aware_exact} | {agnostic['nll']:.3f} | {aware_nll} | "
                     f"{agnostic['seconds'] + (aware['seconds'] if aware else 0):.0f} |")
    lines += ["", f"Whole run: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--needles", type=int, default=100)
    parser.add_argument("--context", type=int, default=768)
    parser.add_argument("--budget", type=float, default=0.25)
    parser.add_argument("--seed", type=int, default=0, help="the needles' seed (0: the judged set)")
    parser.add_argument("--window", type=int, default=None,
                        help="observation window of the policies that have one (default: theirs)")
    parser.add_argument("--aware-only", action="store_true", help="run the query-aware mode only")
    parser.add_argument("--policies", nargs="+", default=None,
                        help="registered kv policies to run (default: every one)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2, the machine's cores)")
    given = sys.argv[1:] if argv is None else argv
    # a run with --window is a section of its own beside the policies at their defaults
    return run_benchmark("passkey_query.py", parser, run, render, argv,
                         variant="--window" if "--window" in given else "")


if __name__ == "__main__":
    sys.exit(main())
