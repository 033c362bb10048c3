"""Which passages made the answer? The ``context`` family on planted facts, beside context-cite
0.0.4 on the same model, sources and questions, and attention sorting's answer accuracy.

Data, built offline here: for each question a fact is planted ("The access code of project
Quillon is 4817.") in the middle of one of N real passages (SciFact **test**-split claims' BM25
candidates, abstracts cut to 60 words; the other N - 1 are the distractors), and SmolLM2-135M
answers "What is the access code of project Quillon?" from them greedily (24 tokens). Each method
scores the passages for that answer; reported: the top-1 and top-3 log-probability drops
(ContextCite's metric: the answer's log-probability with every passage less without the k
best-scored), how often the planted passage ranks first, forward passes and seconds. context-cite
0.0.4 (``--contextcite-python``) attributes the same answers with the same number of ablations;
its weights are compared with ``contextcite``'s. Attention sorting: the share of answers that
hold the planted code with the passages in retrieval order (the planted one at a random place),
attention-sorted (one round), and in reverse of the sorted order.

    python bench/context.py --contextcite-python .venv-contextcite/bin/python --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import SHARED_DATA, run_benchmark, search_set, split_heading  # noqa: E402

NAMES = ["Quillon", "Marbeck", "Tessaly", "Orvane", "Kestrel", "Dunmore", "Fenwick", "Halvard", "Ilsworth", "Jarrow",
         "Lorcan", "Maelis", "Norrow", "Pellam", "Rydal", "Sorrel", "Tamsin", "Ulvik", "Varden", "Wexley"]


def questions(n_passages: int, count: int, seed: int = 0) -> list[dict]:
    """Planted-fact questions over SciFact test claims' BM25 candidates."""
    from salience.search import BM25

    corpus, claims, _ = search_set(SHARED_DATA / "search" / "scifact", "test")
    index = BM25().index([{"id": d["_id"], "text": f"{d.get('title', '')} {d['text']}"} for d in corpus])
    text = {d["_id"]: " ".join(f"{d.get('title', '')}. {d['text']}".split()[:60]) for d in corpus}
    rng = np.random.default_rng(seed)
    out = []
    for i, claim in enumerate(list(claims.values())[:count]):
        hits = index.search(claim, k=n_passages).ids
        name, code = NAMES[i % len(NAMES)], int(rng.integers(1000, 10000))
        gold = hits[int(rng.integers(len(hits)))]
        words = text[gold].split()
        middle = len(words) // 2
        planted = " ".join(words[:middle] + [f"The access code of project {name} is {code}."] + words[middle:])
        passages = {h: (planted if h == gold else text[h]) for h in hits}
        out.append({"passages": passages, "gold": gold, "code": str(code),
                    "question": f"What is the access code of project {name}?"})
    return out


def run(args) -> dict:
    import torch

    from salience.core.base import create
    from salience.models import load_causal_lm
    from salience.models.answering import SourcedQuestion
    from salience.search import attention_sort

    torch.set_num_threads(2)
    model, tokenizer = load_causal_lm("smollm2")
    rows, parity, sorting = [], [], []
    for n in args.passages:
        asked_all = questions(n, args.questions)
        answers = []
        for item in asked_all:
            asked = SourcedQuestion(model, tokenizer, list(item["passages"].values()), item["question"],
                                    max_new_tokens=24)
            answers.append(asked.response_ids)
        methods = {"contextcite (default)": ("contextcite", {"n_ablations": args.ablations}),
                   "contextcite, 32 ablations": ("contextcite", {"n_ablations": 32}),
                   "loo": ("loo", {}), "loo, no prefix cache": ("loo", {"prefix_cache": False}),
                   "attention": ("attention", {}), "kernel_shap": ("kernel_shap", {"n_samples": args.ablations})}
        for label, (name, params) in methods.items():
            method = create("context", name, model=model, tokenizer=tokenizer, **params)
            top1, top3, gold_first, passes, started = [], [], 0, 0, time.perf_counter()
            for item, response in zip(asked_all, answers):
                scores = method.score(item["passages"], item["question"], response)
                passes += method.info_["forward_passes"]
                ranked = scores.ranked_ids()
                gold_first += ranked[0] == item["gold"]
                ids = list(item["passages"])
                asked = SourcedQuestion(model, tokenizer, list(item["passages"].values()), item["question"],
                                        response=response)
                masks = np.ones((3, len(ids)), dtype=bool)
                masks[1, ids.index(ranked[0])] = False
                for r in ranked[:3]:
                    masks[2, ids.index(r)] = False
                lp = asked.log_probs(masks)
                top1.append(lp[0] - lp[1])
                top3.append(lp[0] - lp[2])
            rows.append({"passages": n, "method": label, "top1": float(np.mean(top1)), "top3": float(np.mean(top3)),
                         "gold_first": gold_first / len(asked_all), "passes": passes / len(asked_all),
                         "seconds": (time.perf_counter() - started) / len(asked_all)})
        if args.contextcite_python:
            parity.append(_contextcite(args, model, tokenizer, asked_all, n))
        if n == args.sort_passages:
            sorting = _sorting(model, tokenizer, asked_all, attention_sort)
    return {"rows": rows, "parity": parity, "sorting": sorting, "questions": args.questions,
            "ablations": args.ablations, "split": split_heading("test")}


def _contextcite(args, model, tokenizer, items, n) -> dict:
    from salience.core.base import create

    jobs = [{"sources": list(item["passages"].values()), "query": item["question"], "separator": "\n\n",
             "max_new_tokens": 24, "masks": [[True] * n], "ablations": args.ablations} for item in items]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (Path(tmp) / "jobs.json").write_text(json.dumps(jobs))
        started = time.perf_counter()
        subprocess.run([args.contextcite_python, str(Path(__file__).with_name("contextcite_runner.py")), str(folder),
                        str(Path(tmp) / "jobs.json"), str(Path(tmp) / "out.json")], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
        peer = json.loads((Path(tmp) / "out.json").read_text())
    method = create("context", "contextcite", model=model, tokenizer=tokenizer, n_ablations=args.ablations)
    largest, gold_first = 0.0, 0
    for item, theirs in zip(items, peer):
        ours = method.score(list(item["passages"].values()), item["question"], theirs["response_ids"]).values
        largest = max(largest, float(np.abs(ours - np.array(theirs["attributions"])).max()))
        gold_first += list(item["passages"])[int(np.argmax(theirs["attributions"]))] == item["gold"]
    return {"passages": n, "largest": largest, "gold_first": gold_first / len(items), "seconds": seconds / len(items)}


def _sorting(model, tokenizer, items, attention_sort) -> list[dict]:
    from salience.models.answering import SourcedQuestion

    out = []
    for order_name in ("retrieval order", "attention-sorted", "reverse of attention-sorted"):
        right = 0
        for item in items:
            ids = list(item["passages"])
            if order_name != "retrieval order":
                ids = attention_sort(item["passages"], item["question"], model=model, tokenizer=tokenizer)
                ids = ids if order_name == "attention-sorted" else ids[::-1]
            asked = SourcedQuestion(model, tokenizer, [item["passages"][i] for i in ids], item["question"],
                                    max_new_tokens=16)
            right += item["code"] in asked.response
        out.append({"order": order_name, "accuracy": right / len(items)})
    return out


def render(result: dict, command: str, seconds: float) -> str:
    lines = ["## Which passages made the answer: context attribution on planted facts (`bench/context.py`)", "",
             f"Command: `{command}` ({seconds:.0f} s). SmolLM2-135M; {result['questions']} questions per context "
             f"size, each a fact planted in one of N BM25 candidates of a SciFact claim ({result['split']}); the "
             "model's own greedy answer attributed. Drops: the answer's log-probability with every passage less "
             "without the top-k scored (ContextCite's metric; larger is better). Nothing was tuned.", "",
             "| N | method | top-1 drop | top-3 drop | planted passage first | forward passes / question | "
             "seconds / question |", "|---:|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['passages']} | {r['method']} | {r['top1']:+.3f} | {r['top3']:+.3f} | "
                     f"{r['gold_first']:.0%} | {r['passes']:.0f} | {r['seconds']:.2f} |")
    if result["parity"]:
        lines += ["", f"context-cite 0.0.4 on the same answers with {result['ablations']} ablations (its own masks, "
                  "forward passes and Lasso, run in `.venv-contextcite`): " + "; ".join(
                      f"N = {p['passages']}: largest weight difference {p['largest']:.1e}, planted passage first "
                      f"{p['gold_first']:.0%}, {p['seconds']:.1f} s / question (with its model load)"
                      for p in result["parity"]) + "."]
    if result["sorting"]:
        lines += ["", "Attention sorting (one round), answers holding the planted code: " + "; ".join(
            f"{s['order']} {s['accuracy']:.0%}" for s in result["sorting"]) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=10, help="questions per context size (default 10)")
    parser.add_argument("--passages", type=int, nargs="+", default=[5, 10], help="context sizes N (default 5 10)")
    parser.add_argument("--ablations", type=int, default=64, help="contextcite's ablations (default 64, its default)")
    parser.add_argument("--sort-passages", type=int, default=10, help="N for attention sorting (default 10)")
    parser.add_argument("--contextcite-python", default=None,
                        help="python of an environment with context-cite 0.0.4 (make .venv-contextcite/bin/python)")
    return run_benchmark("context.py", parser, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
