"""The peers' side of ``bench/quantize.py``, run in llm-compressor's environment (``make
.venv-llmcompressor``: llm-compressor 0.14, compressed-tensors, torchao 0.18):
``.venv-llmcompressor/bin/python bench/quant_anchor.py IN.json OUT.json``.

IN holds the dense model's folder, the calibration and evaluation windows made by the benchmark
(both sides read the same tokens), the configurations and the folders salience wrote. For each
llm-compressor configuration: ``oneshot`` wall seconds, perplexity, the compressed folder's
bytes. For torchao: int8 / int4 weight-only on the dense model, perplexity, decode tokens/s,
bytes of its state dict. For every salience folder: loaded by transformers through
compressed-tensors (the loader vLLM-style tools use), its perplexity. Imports nothing from
salience."""

from __future__ import annotations

import copy
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from llmcompressor_anchor import perplexity  # the same environment's perplexity, one implementation


def decode_speed(model, prompt, new_tokens: int) -> float:
    """Greedy decoding tokens/s after a prompt (best of 2), the KV cache on."""
    ids = torch.tensor([prompt])
    best = float("inf")
    with torch.no_grad():
        for _ in range(2):
            start = time.perf_counter()
            model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
            best = min(best, time.perf_counter() - start)
    return new_tokens / best


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in Path(folder).rglob("*.safetensors"))


def skip_pinning_without_accelerator() -> None:
    """llm-compressor 0.14's AWQ pins its cached activations (page-locked memory, for faster
    copies to a device), which stops a CPU-only machine with "Cannot access accelerator device
    when none is available". Without a device there is nothing to copy to: pinning is skipped,
    which changes no value."""
    if torch.accelerator.is_available():
        return
    from llmcompressor.pipelines.cache import IntermediatesCache

    IntermediatesCache.pin_memory = lambda self, *args, **kwargs: None


def run_llmcompressor(dense, tokenizer, job, results):
    from llmcompressor import oneshot
    from llmcompressor.modifiers.gptq import GPTQModifier
    from llmcompressor.modifiers.quantization import QuantizationModifier

    skip_pinning_without_accelerator()
    calibration = Dataset.from_dict({"input_ids": job["calibration"],
                                     "attention_mask": [[1] * len(w) for w in job["calibration"]]})
    for config in job["llmcompressor"]:
        model = copy.deepcopy(dense)
        extra = {"bypass_divisibility_checks": True} if config.get("bypass") else {}
        groups = {"group_0": {"targets": ["Linear"], "weights": {
            "num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": config.get("group")}}}
        if config["method"] == "gptq":
            modifier = GPTQModifier(config_groups=groups, ignore=["lm_head"], block_size=128, dampening_frac=0.01,
                                    **extra)
        elif config["method"] == "awq":  # its scale search, then round-to-nearest on the scaled weights
            from llmcompressor.modifiers.transform import AWQModifier

            modifier = [AWQModifier(), QuantizationModifier(config_groups=groups, ignore=["lm_head"], **extra)]
        else:
            modifier = QuantizationModifier(scheme=config["scheme"], targets=["Linear"], ignore=["lm_head"], **extra)
        try:
            start = time.perf_counter()
            oneshot(model=model, processor=tokenizer, dataset=calibration,
                    recipe=modifier if isinstance(modifier, list) else [modifier],
                    num_calibration_samples=len(job["calibration"]), max_seq_length=len(job["calibration"][0]),
                    shuffle_calibration_samples=False)
            seconds = time.perf_counter() - start
            row = {**config, "seconds": seconds, "perplexity": perplexity(model, job["evaluation"])}
        except Exception as err:  # noqa: BLE001 - a configuration llm-compressor refuses is the finding
            row = {**config, "error": f"{type(err).__name__}: {str(err)[:400]}"}
        if "error" not in row:
            out = Path(tempfile.mkdtemp(prefix="llmc-"))
            try:
                model.save_pretrained(out, save_compressed=True)
                row["bytes"] = folder_bytes(out)
            except Exception as err:  # noqa: BLE001
                row["save_error"] = f"{type(err).__name__}: {str(err)[:300]}"
            shutil.rmtree(out, ignore_errors=True)
        results["llmcompressor"].append(row)
        print(f"llm-compressor {row}", file=sys.stderr, flush=True)
        del model


def run_torchao(dense, job, results):
    from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, quantize_

    prompt = job["evaluation"][0][: job["prompt_tokens"]]
    for name in job["torchao"]:
        model = copy.deepcopy(dense)
        try:
            start = time.perf_counter()
            if name == "int8":
                quantize_(model, Int8WeightOnlyConfig())
            else:
                model = model.to(torch.bfloat16)
                quantize_(model, Int4WeightOnlyConfig(group_size=64, int4_packing_format=name.split(":")[1]))
            seconds = time.perf_counter() - start
            row = {"config": name, "seconds": seconds, "perplexity": perplexity(model, job["evaluation"]),
                   "tokens_per_s": decode_speed(model, prompt, job["new_tokens"])}
            with tempfile.TemporaryDirectory() as folder:
                torch.save(model.state_dict(), Path(folder) / "state.pt")
                row["bytes"] = (Path(folder) / "state.pt").stat().st_size
        except Exception as err:  # noqa: BLE001 - a configuration torchao does not run on this CPU is reported
            row = {"config": name, "error": f"{type(err).__name__}: {str(err)[:300]}"}
        results["torchao"].append(row)
        print(f"torchao {name}: {row}", file=sys.stderr, flush=True)
        del model


def read_salience_folders(job, results):
    for folder in job["salience_folders"]:
        try:
            model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
            row = {"folder": folder, "perplexity": perplexity(model, job["evaluation"])}
        except Exception as err:  # noqa: BLE001 - a folder compressed-tensors cannot read is the finding
            row = {"folder": folder, "error": f"{type(err).__name__}: {str(err)[:300]}"}
        results["read"].append(row)
        print(f"compressed-tensors reads {folder}: {row}", file=sys.stderr, flush=True)


def main(inp: Path, out: Path) -> None:
    job = json.loads(inp.read_text())
    torch.set_num_threads(job.get("threads", 2))
    dense = AutoModelForCausalLM.from_pretrained(job["dense"], torch_dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(job["dense"])
    from importlib.metadata import version

    results = {"versions": {p: version(p) for p in ("llmcompressor", "compressed-tensors", "torchao", "transformers",
                                                    "torch")},
               "dense": {"perplexity": perplexity(dense, job["evaluation"]),
                         "tokens_per_s": decode_speed(dense, job["evaluation"][0][: job["prompt_tokens"]],
                                                      job["new_tokens"])},
               "llmcompressor": [], "torchao": [], "read": []}
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    read_salience_folders(job, results)
    run_torchao(dense, job, results)
    run_llmcompressor(dense, tokenizer, job, results)
    out.write_text(json.dumps(results))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
