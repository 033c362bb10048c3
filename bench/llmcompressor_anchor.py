"""The llm-compressor side of ``bench/compress.py``, run in its own virtual environment
(llm-compressor pins its own transformers): ``.venv-llmcompressor/bin/python
bench/llmcompressor_anchor.py IN.json OUT.json``. IN holds the GGUF path, the calibration
windows and the evaluation windows made by the benchmark (both sides read the same tokens) and
the configurations; OUT gets each configuration's perplexity, sparsity and the wall seconds of
``oneshot``. Imports nothing from salience."""

from __future__ import annotations

import copy
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from llmcompressor import oneshot
from llmcompressor.modifiers.pruning import SparseGPTModifier, WandaPruningModifier

MODIFIERS = {"wanda": WandaPruningModifier, "sparsegpt": SparseGPTModifier}


def perplexity(model, windows, batch_size=4) -> float:
    batch = torch.tensor(windows)
    total, count = 0.0, 0
    with torch.no_grad():
        for lo in range(0, len(batch), batch_size):
            chunk = batch[lo : lo + batch_size]
            logits = model(input_ids=chunk, use_cache=False).logits[:, :-1].double()
            total += float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                             chunk[:, 1:].reshape(-1), reduction="sum"))
            count += chunk[:, 1:].numel()
    return math.exp(total / count)


def sparsity(model) -> float:
    zeros = total = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and ".layers." in f".{name}" and "lm_head" not in name:
            zeros += int((module.weight == 0).sum())
            total += module.weight.numel()
    return zeros / total


def main(inp: Path, out: Path) -> None:
    job = json.loads(inp.read_text())
    torch.set_num_threads(job.get("threads", 2))
    path = Path(job["gguf"])
    dense = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, torch_dtype=torch.float32).eval()
    for holder in (dense, dense.config):  # the dequantized weights are plain tensors
        if "is_quantized" in vars(holder):
            holder.is_quantized = False
    if hasattr(dense.config, "quantization_config"):
        del dense.config.quantization_config
    dense.hf_quantizer = None
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)  # oneshot asks for a processor
    # oneshot re-reads the config from the model's folder: give it an ordinary one
    folder = Path(tempfile.mkdtemp(prefix="smollm2-"))
    dense.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    dense = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32).eval()
    calibration = Dataset.from_dict({"input_ids": job["calibration"],
                                     "attention_mask": [[1] * len(w) for w in job["calibration"]]})
    from importlib.metadata import version

    results = {"llmcompressor": version("llmcompressor"), "transformers": version("transformers"),
               "dense": perplexity(dense, job["evaluation"]), "configs": []}
    for config in job["configs"]:
        model = copy.deepcopy(dense)
        modifier = MODIFIERS[config["method"]](sparsity=config.get("sparsity", 0.5),
                                               mask_structure=config.get("pattern", "0:0"),
                                               targets=["Linear"], ignore=["re:.*lm_head"],
                                               **({"dampening_frac": 0.01, "block_size": 128}
                                                  if config["method"] == "sparsegpt" else {}))
        start = time.perf_counter()
        oneshot(model=model, processor=tokenizer, dataset=calibration, recipe=[modifier], num_calibration_samples=len(job["calibration"]),
                max_seq_length=len(job["calibration"][0]), shuffle_calibration_samples=False)
        seconds = time.perf_counter() - start
        results["configs"].append({**config, "seconds": seconds, "perplexity": perplexity(model, job["evaluation"]),
                                   "sparsity": sparsity(model)})
        print(f"llm-compressor {config} done: {results['configs'][-1]['perplexity']:.2f}", file=sys.stderr,
              flush=True)
        del model
    out.write_text(json.dumps(results))
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
