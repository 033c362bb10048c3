"""KV-cache budgets per layer from layer importance, on SmolLM2-135M-Instruct: the uniform
budget (SnapKV), PyramidKV's fixed pyramid (kvpress's formula; equal to kvpress within 1e-4,
``bench/kvcache.py``) and ``layer_budget``: each layer's share from its block influence
(ShortGPT) measured on calibration text, over SnapKV's scores.

Data: the standard library's docstrings. Calibration (layer importance): 16 windows of 256
tokens drawn from the first half. Evaluation: the second half cut into consecutive windows of
``context + continuation`` tokens (as ``bench/kvcache.py``): the first ``--dev-windows`` are
the **dev** split, where ``layer_budget``'s floor is chosen (the lowest dev perplexity of
``--floors``), the next ``--test-windows`` the **test** split, where it is judged.

    python bench/kv_layers.py --write BENCHMARKS.md
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
    from salience.compress import calibration_windows, stdlib_docstrings
    from salience.compress.kv.eviction import kv_policy
    from salience.compress.kv.evaluation import kv_eval
    from salience.compress.layers import block_influence
    from salience.models.lm import load_causal_lm

    model, tokenizer = load_causal_lm("smollm2")
    ids = tokenizer.encode(stdlib_docstrings(max_chars=1_500_000), add_special_tokens=False)
    half = len(ids) // 2
    span = args.context + args.continuation
    dev = ids[half : half + span * args.dev_windows]
    test = ids[half + span * args.dev_windows : half + span * (args.dev_windows + args.test_windows)]
    start = time.perf_counter()
    importance = block_influence(model, calibration_windows(ids[:half], seqlen=256, n_samples=16, seed=0)).values
    importance_seconds = time.perf_counter() - start

    def perplexity(tokens, policy, budget):
        return kv_eval(model, tokens, policy=policy, budget=budget, context=args.context,
                       continuation=args.continuation, max_windows=None).perplexity

    rows, dev_rows = [], []
    full = {"dev": perplexity(dev, None, None), "test": perplexity(test, None, None)}
    for budget in args.budgets:
        floors = {}
        for floor in args.floors:  # the floor chosen on dev
            floors[floor] = perplexity(dev, kv_policy("layer_budget", importance=importance, floor=floor), budget)
            dev_rows.append({"budget": budget, "floor": floor, "dev": floors[floor]})
            print(dev_rows[-1], file=sys.stderr, flush=True)
        chosen = min(floors, key=floors.get)
        candidates = {"snapkv (uniform)": kv_policy("snapkv"), "pyramidkv": kv_policy("pyramidkv"),
                      f"layer_budget (block influence, floor {chosen})":
                          kv_policy("layer_budget", importance=importance, floor=chosen)}
        for label, policy in candidates.items():
            start = time.perf_counter()
            value = perplexity(test, policy, budget)
            rows.append({"budget": budget, "policy": label, "test": value,
                         "dev": perplexity(dev, policy, budget) if label != next(reversed(candidates)) else floors[chosen],
                         "seconds": time.perf_counter() - start})
            print(rows[-1], file=sys.stderr, flush=True)
        keep = int(args.context * budget)
        rows[-1]["tokens_per_layer"] = candidates[next(reversed(candidates))].layer_budgets(
            keep, args.context, len(importance)).tolist()
    return {"rows": rows, "dev_rows": dev_rows, "full": full, "importance": [float(x) for x in importance],
            "importance_seconds": importance_seconds, "args": vars(args)}


def render(result: dict, command: str, seconds: float) -> str:
    a = result["args"]
    lines = ["## KV-cache budgets per layer from layer importance (`bench/kv_layers.py`)", "",
             f"Command: `{command}`", "",
             f"SmolLM2-135M-Instruct, continuation perplexity (windows of {a['context']} context tokens evicted + "
             f"{a['continuation']} scored) on the standard library's docstrings: **dev** = the second half's first "
             f"{a['dev_windows']} windows (layer_budget's floor chosen there, from {a['floors']}), **test** = the next "
             f"{a['test_windows']}. Layer importance: block influence on 16 calibration windows of the first half "
             f"({result['importance_seconds']:.1f} s). Full cache: dev {result['full']['dev']:.3f}, test "
             f"{result['full']['test']:.3f}. PyramidKV: kvpress's fixed pyramid (equal to kvpress within 1e-4, "
             "`bench/kvcache.py`); every policy on SnapKV's scores at its defaults (window 64, kernel 5).", "",
             "| budget | policy | test perplexity | vs uniform | dev perplexity | seconds (test) |",
             "|---:|---|---:|---:|---:|---:|"]
    uniform = {}
    for r in result["rows"]:
        uniform.setdefault(r["budget"], r["test"])
        lines.append(f"| {r['budget']:.0%} | {r['policy']} | {r['test']:.3f} | "
                     f"{r['test'] / uniform[r['budget']] - 1:+.1%} | {r['dev']:.3f} | {r['seconds']:.0f} |")
    lines += ["", "Dev choice of the floor (the share of the uniform budget every layer keeps): "
              + "; ".join(f"{r['budget']:.0%} floor {r['floor']}: {r['dev']:.3f}" for r in result["dev_rows"]) + ".",
              "", "Block influence per layer: " + ", ".join(f"{x:.3f}" for x in result["importance"]) + "."]
    for r in result["rows"]:
        if "tokens_per_layer" in r:
            lines.append(f"Tokens per head by layer at {r['budget']:.0%}: {r['tokens_per_layer']}.")
    lines += ["", f"Whole run: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=768)
    parser.add_argument("--continuation", type=int, default=256)
    parser.add_argument("--dev-windows", type=int, default=4)
    parser.add_argument("--test-windows", type=int, default=8)
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.25, 0.1])
    parser.add_argument("--floors", type=float, nargs="+", default=[0.25, 0.5, 0.75])
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2, the machine's cores)")
    return run_benchmark("kv_layers.py", parser, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
