"""ContextCite 0.0.4's side of bench/verify.py's passage parity, run in its own environment
(``make .venv-contextcite/bin/python``): for each job, ContextCite's ``ContextCiter`` over the
job's passages (a partitioner whose sources are the passages, joined by the separator) answers
the query with its own generation, and the response's log-probability under each given mask of
kept passages is computed by ContextCite's own code (its ablation dataset, forward passes and
``aggregate_logit_probs(..., "log_prob")``).

    .venv-contextcite/bin/python bench/contextcite_runner.py MODEL_FOLDER JOBS.json OUT.json [float64]

``float64``: the model and torch's default dtype in double precision, so ContextCite's own
arithmetic (its float32 buffer of per-token logit differences, their logsigmoid and sum) runs
in float64 too: parity then measures the formula, not float32 rounding.

A job: {"sources": [...], "query": ..., "separator": "\\n\\n", "max_new_tokens": N,
"masks": [[true, false, ...], ...], "ablations": N (optional: ContextCite's attributions with N
ablation masks), "response": text (optional: the answer attributed, instead of its own
generation)}. Out: per job {"response_ids", "log_probs", "attributions", "seconds"}.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


def run_contextcite(python: str, model, tokenizer, jobs: list, dtype: str = "float32") -> tuple[list, float]:
    """From salience's side: ``jobs`` run by this script in context-cite's environment
    (``python``) on ``model`` saved to a temporary folder; (its results, seconds with its model
    load)."""
    import subprocess
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (Path(tmp) / "jobs.json").write_text(json.dumps(jobs))
        started = time.perf_counter()
        subprocess.run([python, __file__, str(folder), str(Path(tmp) / "jobs.json"), str(Path(tmp) / "out.json"), dtype],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return json.loads((Path(tmp) / "out.json").read_text()), time.perf_counter() - started


def main(model_folder: str, jobs_path: str, out_path: str, dtype: str = "float32") -> None:
    import torch
    from context_cite import ContextCiter
    from context_cite.context_partitioner import BaseContextPartitioner
    from context_cite.utils import _get_response_logit_probs, aggregate_logit_probs
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    class Passages(BaseContextPartitioner):
        """The passages as ContextCite's sources."""

        def __init__(self, sources, separator):
            super().__init__(separator.join(sources))
            self.parts, self.separator = list(sources), separator

        @property
        def num_sources(self):
            return len(self.parts)

        def split_context(self):
            pass

        def get_source(self, index):
            return self.parts[index]

        def get_context(self, mask=None):
            mask = np.ones(len(self.parts), dtype=bool) if mask is None else mask
            return self.separator.join(p for p, keep in zip(self.parts, mask) if keep)

    model = AutoModelForCausalLM.from_pretrained(model_folder).eval()
    if dtype == "float64":
        torch.set_default_dtype(torch.float64)
        model = model.double()
    tokenizer = AutoTokenizer.from_pretrained(model_folder)
    results = []
    for job in json.load(open(jobs_path, encoding="utf-8")):
        start = time.perf_counter()
        partitioner = Passages(job["sources"], job["separator"])
        citer = ContextCiter(model, tokenizer, partitioner.context, job["query"], partitioner=partitioner,
                             generate_kwargs={"max_new_tokens": job["max_new_tokens"], "do_sample": False},
                             num_ablations=job.get("ablations", 64))
        if job.get("response") is not None:  # the answer given: ContextCite's cached output, prompt + response
            citer._cache["output"] = citer._get_prompt_ids(return_prompt=True)[1] + job["response"]
        response_ids = list(citer._response_ids)
        attributions = None
        if job.get("ablations"):  # ContextCite's own surrogate weights over the sources
            attributions = [float(v) for v in citer.get_attributions(verbose=False)]
        rows = {"input_ids": [], "attention_mask": [], "labels": []}
        for mask in job["masks"]:
            prompt_ids = citer._get_prompt_ids(mask=np.asarray(mask, dtype=bool))
            rows["input_ids"].append(prompt_ids + response_ids)
            rows["attention_mask"].append([1] * (len(prompt_ids) + len(response_ids)))
            rows["labels"].append([-100] * len(prompt_ids) + response_ids)
        logit_probs = _get_response_logit_probs(Dataset.from_dict(rows), model, tokenizer, len(response_ids), 1)
        log_probs = aggregate_logit_probs(logit_probs, output_type="log_prob")
        results.append({"response_ids": response_ids, "log_probs": [float(v) for v in log_probs],
                        "attributions": attributions, "seconds": time.perf_counter() - start})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
