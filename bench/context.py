"""Which passages made the answer? The ``context`` family on planted facts and on SciFact's gold
evidence, beside context-cite 0.0.4 on the same model, sources and answers; attention sorting's
answer accuracy (``--task attribution``); the answer path's seconds per question (``--task answer``),
each its own section.

Data, built offline here (``--split``: test reports, dev chooses):
(a) planted facts: for each question a fact ("The access code of project Quillon is 4817.") is
    planted in the middle of one of N real passages (a SciFact claim's BM25 candidates, abstracts
    cut to 60 words; the other N - 1 are distractors), and SmolLM2-135M answers "What is the
    access code of project Quillon?" from them greedily (24 tokens);
(b) SciFact evidence: a claim's N BM25 candidates with its gold evidence abstracts put in (in
    place of the lowest-ranked others), the model's greedy answer to "Is this claim true?".
Each method scores the passages for that answer; reported: the top-1 and top-3 log-probability
drops (ContextCite's metric: the answer's log-probability with every passage less without the k
best-scored), how often a gold passage ranks first, forward passes and seconds. context-cite
0.0.4 (``--contextcite-python``) attributes the same answers (its cached output set to them) with
32, 64 and 256 ablations (``--peer-ablations``), as ``contextcite`` does; its weights are
compared with ``contextcite``'s and its rankings get
the same drops. Attention sorting: the share of answers that hold the planted code with the
passages in retrieval order (the planted one at a random place), attention-sorted (one round),
and in reverse of the sorted order. The answer path (:func:`salience.answer.answer`): SciFact
claims over the whole corpus's BM25 index, k = 20, a budget of 1,024 tokens, its defaults, in
float32 and bfloat16 weights, with and without prompt lookup decoding.

    python bench/context.py --contextcite-python .venv-contextcite/bin/python --write BENCHMARKS.md
    python bench/context.py --task answer --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import SHARED_DATA, run_benchmark, search_set, split_heading  # noqa: E402
from contextcite_runner import run_contextcite  # noqa: E402

NAMES = ["Quillon", "Marbeck", "Tessaly", "Orvane", "Kestrel", "Dunmore", "Fenwick", "Halvard", "Ilsworth", "Jarrow",
         "Lorcan", "Maelis", "Norrow", "Pellam", "Rydal", "Sorrel", "Tamsin", "Ulvik", "Varden", "Wexley"]


def _scifact(split: str):
    from salience.search import BM25

    corpus, claims, qrels = search_set(SHARED_DATA / "search" / "scifact", split)
    index = BM25().index([{"id": d["_id"], "text": f"{d.get('title', '')} {d['text']}"} for d in corpus])
    text = {d["_id"]: " ".join(f"{d.get('title', '')}. {d['text']}".split()[:60]) for d in corpus}
    return corpus, claims, qrels, index, text


def planted_questions(data, n_passages: int, count: int, seed: int = 0) -> list[dict]:
    """Planted-fact questions over SciFact claims' BM25 candidates."""
    _, claims, _, index, text = data
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
        out.append({"passages": passages, "gold": {gold}, "code": str(code),
                    "question": f"What is the access code of project {name}?"})
    return out


def evidence_questions(data, n_passages: int, count: int) -> list[dict]:
    """SciFact claims with their gold evidence among their BM25 candidates (in retrieval order)."""
    _, claims, qrels, index, text = data
    out = []
    for claim_id, claim in list(claims.items())[:count]:
        gold = [d for d, grade in qrels[claim_id].items() if grade > 0 and d in text]
        if not gold:
            continue
        ranked = index.search(claim, k=len(text)).ids  # the whole ranking: a gold abstract may rank low
        others = [d for d in ranked if d not in gold][: n_passages - len(gold)]
        position = {d: r for r, d in enumerate(ranked)}
        ids = sorted(others + gold, key=lambda d: position.get(d, len(ranked)))
        out.append({"passages": {d: text[d] for d in ids}, "gold": set(gold), "question": f"{claim} Is this claim "
                                                                                          "true?"})
    return out


def _attribute(model, tokenizer, items, answers, methods: dict, what: str, n: int) -> tuple[list, dict]:
    """Each method's rows (drops, gold first, passes, seconds) and its scores per item."""
    from salience.core.base import create
    from salience.models.answering import SourcedQuestion

    rows, kept_scores = [], {}
    for label, (name, params) in methods.items():
        method = create("context", name, model=model, tokenizer=tokenizer, **params)
        passes, seconds, scores_of = 0, 0.0, []
        for item, response in zip(items, answers):
            started = time.perf_counter()
            scores = method.score(item["passages"], item["question"], response)
            seconds += time.perf_counter() - started
            passes += method.info_["forward_passes"]
            scores_of.append(scores.ranked_ids())
        kept_scores[label] = scores_of
        rows.append({"set": what, "passages": n, "method": label, "passes": passes / len(items),
                     "seconds": seconds / len(items),
                     **_drops(model, tokenizer, items, answers, scores_of, SourcedQuestion)})
    return rows, kept_scores


def _drops(model, tokenizer, items, answers, rankings, SourcedQuestion) -> dict:
    """Mean top-1 / top-3 drops of the answers' log-probabilities and the gold-first rate."""
    top1, top3, gold_first = [], [], 0
    for item, response, ranked in zip(items, answers, rankings):
        ids = list(item["passages"])
        asked = SourcedQuestion(model, tokenizer, list(item["passages"].values()), item["question"], response=response)
        masks = np.ones((3, len(ids)), dtype=bool)
        masks[1, ids.index(ranked[0])] = False
        for r in ranked[:3]:
            masks[2, ids.index(r)] = False
        lp = asked.log_probs(masks)
        top1.append(lp[0] - lp[1])
        top3.append(lp[0] - lp[2])
        gold_first += ranked[0] in item["gold"]
    return {"top1": float(np.mean(top1)), "top3": float(np.mean(top3)), "gold_first": gold_first / len(items)}


def _methods(args, full: bool) -> dict:
    methods = {f"contextcite, {b} ablations" + (" (default)" if b == 64 else ""): ("contextcite", {"n_ablations": b})
               for b in (args.ablations if full else (64,))}
    methods |= {"loo": ("loo", {}), "attention": ("attention", {}), "gradient": ("gradient", {})}
    if full:
        methods |= {"loo, no prefix cache": ("loo", {"prefix_cache": False}),
                    "kernel_shap, 64 samples": ("kernel_shap", {"n_samples": 64})}
    return methods


def run(args) -> dict:
    import torch

    from salience.models import load_causal_lm
    from salience.models.answering import SourcedQuestion
    from salience.search import attention_sort

    torch.set_num_threads(2)
    model, tokenizer = load_causal_lm("smollm2")
    data = _scifact(args.split)
    rows, parity, sorting, log_prob_parity, prefix_reads = [], [], [], None, None
    for n in args.passages:
        items = planted_questions(data, n, args.questions)
        answers = [SourcedQuestion(model, tokenizer, list(i["passages"].values()), i["question"],
                                   max_new_tokens=24).response_ids for i in items]
        full = n == args.sweep_passages
        found, scores = _attribute(model, tokenizer, items, answers, _methods(args, full), "planted facts", n)
        rows += found
        if full:
            prefix_reads = _prefix_reads(model, tokenizer, items, answers)
        if full and args.contextcite_python:
            parity = _contextcite(args, model, tokenizer, items, answers, scores, n)
            log_prob_parity = _log_prob_parity(args, model, tokenizer, items, answers)
        if n == args.sort_passages:
            sorting = _sorting(model, tokenizer, items, attention_sort)
    evidence = evidence_questions(data, args.evidence_passages, args.questions)
    answers = [SourcedQuestion(model, tokenizer, list(i["passages"].values()), i["question"],
                               max_new_tokens=24).response_ids for i in evidence]
    rows += _attribute(model, tokenizer, evidence, answers, _methods(args, False), "SciFact evidence",
                       args.evidence_passages)[0]
    return {"rows": rows, "parity": parity, "log_prob_parity": log_prob_parity, "sorting": sorting,
            "prefix_reads": prefix_reads, "sweep_passages": args.sweep_passages,
            "questions": args.questions, "split": split_heading(args.split)}


def _prefix_reads(model, tokenizer, items, answers) -> float:
    """Tokens leave-one-out reads recomputing every context over those it reads onto the cached
    prefix (the whole context read once either way): the most the cache can save where a
    forward pass costs in proportion to its tokens."""
    from salience.models.answering import SourcedQuestion

    whole_reads = cached_reads = 0
    for item, response in zip(items, answers):
        asked = SourcedQuestion(model, tokenizer, list(item["passages"].values()), item["question"], response=response)
        n, r = len(asked.sources), len(asked.response_ids)
        start = len(asked.prompt_ids(np.ones(n, dtype=bool))) + r
        whole_reads += start
        cached_reads += start
        for kept in ~np.eye(n, dtype=bool):
            prompt = asked.prompt_ids(kept)
            whole_reads += len(prompt) + r
            cached_reads += len(prompt) - asked.shared_prefix(prompt) + r
    return whole_reads / cached_reads


def _contextcite(args, model, tokenizer, items, answers, scores, n) -> list[dict]:
    """context-cite 0.0.4 on the same answers at each ablation budget: its weights against
    ``contextcite``'s on the same masks, and the drops of its rankings."""
    from salience.core.base import create
    from salience.models.answering import SourcedQuestion

    out = []
    for budget in args.peer_ablations:
        jobs = [{"sources": list(item["passages"].values()), "query": item["question"], "separator": "\n\n",
                 "max_new_tokens": 24, "masks": [[True] * n], "ablations": budget,
                 "response": tokenizer.decode(response)} for item, response in zip(items, answers)]
        peer, seconds = run_contextcite(args.contextcite_python, model, tokenizer, jobs)
        method = create("context", "contextcite", model=model, tokenizer=tokenizer, n_ablations=budget)
        largest, same_tokens, rankings = 0.0, 0, []
        for item, response, theirs in zip(items, answers, peer):
            ids = list(item["passages"])
            rankings.append([ids[i] for i in np.argsort(-np.array(theirs["attributions"]), kind="stable")])
            if list(theirs["response_ids"]) == list(response):  # the same tokens: the weights must agree
                same_tokens += 1
                ours = method.score(item["passages"], item["question"], response)
                largest = max(largest, float(np.abs(ours.values - np.array(theirs["attributions"])).max()))
        out.append({"ablations": budget, "largest": largest, "compared": same_tokens, "seconds": seconds / len(items),
                    **_drops(model, tokenizer, items, answers, rankings, SourcedQuestion)})
    return out


def _log_prob_parity(args, model, tokenizer, items, answers) -> dict:
    """The answers' log-probabilities with 0 to 3 passages removed (in retrieval order) by
    context-cite's own code and by salience's, both in float64 (context-cite under torch's
    float64 default dtype, the model in double): the formula compared without float32's
    rounding."""
    import copy

    from salience.models.answering import SourcedQuestion

    double = copy.deepcopy(model).double()
    masks_of, jobs = [], []
    for item, response in zip(items, answers):
        masks = [[i >= k for i in range(len(item["passages"]))] for k in range(4)]
        masks_of.append(masks)
        jobs.append({"sources": list(item["passages"].values()), "query": item["question"], "separator": "\n\n",
                     "max_new_tokens": 24, "masks": masks, "response": tokenizer.decode(response)})
    peer, _ = run_contextcite(args.contextcite_python, double, tokenizer, jobs, "float64")
    largest, relative, compared = 0.0, 0.0, 0
    for item, masks, theirs in zip(items, masks_of, peer):
        ours = SourcedQuestion(double, tokenizer, list(item["passages"].values()), item["question"],
                               response=theirs["response_ids"]).log_probs(np.array(masks))
        difference = np.abs(ours - np.array(theirs["log_probs"]))
        largest = max(largest, float(difference.max()))
        relative = max(relative, float((difference / np.abs(np.array(theirs["log_probs"]))).max()))
        compared += len(masks)
    return {"masks": compared, "largest": largest, "relative": relative}


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


def _answer_path(args) -> dict:
    """Seconds per question of the answer path over SciFact's whole corpus, k = 20, budget 1,024,
    in float32 and bfloat16 weights, with plain greedy decoding and with prompt lookup; its
    answers and first citations set beside float32's plain greedy ones."""
    import torch

    from salience.answer import ANSWER_OPTIONS, answer
    from salience.models import load_causal_lm
    from salience.search import BM25

    torch.set_num_threads(2)
    corpus, claims, _, _, _ = _scifact(args.split)
    index = BM25().index([{"id": d["_id"], "title": d.get("title", ""), "text": d["text"]}
                          for d in corpus])
    questions = list(claims.values())[: args.answer_questions]
    lookups = sorted({0, ANSWER_OPTIONS["lookup_tokens"]})
    rows, reference = [], None
    for dtype in args.dtypes:
        model, tokenizer = load_causal_lm("smollm2", dtype=dtype)
        answer(index, questions[0], model=model, tokenizer=tokenizer, k=20, budget=1024)  # warm-up, not timed
        for lookup in lookups:
            seconds, stages, outputs = [], {}, []
            for claim in questions:
                started = time.perf_counter()
                result = answer(index, claim, model=model, tokenizer=tokenizer, k=20, budget=1024,
                                lookup_tokens=lookup)
                seconds.append(time.perf_counter() - started)
                outputs.append((result.answer, result.citations[0].id if result.citations else None))
                for stage, value in result.seconds.items():
                    stages.setdefault(stage, []).append(value)
            reference = reference or outputs
            rows.append({"dtype": dtype, "lookup": lookup, "mean": float(np.mean(seconds)),
                         "median": float(np.median(seconds)), "max": float(np.max(seconds)),
                         "under_5": int(sum(s <= 5 for s in seconds)),
                         "stages": {k: float(np.mean(v)) for k, v in stages.items()},
                         "cited": sum(o[1] is not None for o in outputs),
                         "same_answer": sum(a[0] == b[0] for a, b in zip(outputs, reference)),
                         "same_first": sum(a[1] == b[1] for a, b in zip(outputs, reference))})
            print(rows[-1], file=sys.stderr, flush=True)
    return {"rows": rows, "questions": len(questions), "cite": ANSWER_OPTIONS["cite"],
            "split": split_heading(args.split), "max_new_tokens": ANSWER_OPTIONS["max_new_tokens"], "random_draws": ANSWER_OPTIONS["random_draws"]}


def render_answer_path(result: dict, command: str, seconds: float) -> str:
    lines = ["## The answer path end to end: seconds per question (`bench/context.py --task answer`)", "",
             f"Command: `{command}` ({seconds:.0f} s). `salience search answer` at its defaults (cite by "
             f"{result['cite']}, {result['max_new_tokens']} new tokens at most, verification with "
             f"{result['random_draws']} random draws) over SciFact's whole corpus (BM25), k = 20, a budget of 1,024 "
             f"tokens, SmolLM2-135M on 2 cores; the {result['questions']} first claims of the {result['split']} as "
             "questions, a warm-up question first. Prompt lookup: tokens copied from the prompt checked in the same "
             "pass as the next (`--lookup-tokens`; 0: plain greedy). Same answer / same first citation: against "
             "float32 weights with plain greedy decoding.", "",
             "| weights | lookup tokens | mean s | median s | max s | questions <= 5 s | generate s | cite s | "
             "verify s | sentences s | same answer | same first citation | answers cited |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    n = result["questions"]
    for r in result["rows"]:
        st = r["stages"]
        lines.append(f"| {r['dtype']} | {r['lookup']} | {r['mean']:.2f} | {r['median']:.2f} | {r['max']:.2f} | "
                     f"{r['under_5']} of {n} | {st.get('generate', 0):.2f} | {st.get('cite', 0):.2f} | "
                     f"{st.get('verify', 0):.2f} | {st.get('sentences', 0):.2f} | {r['same_answer']} of {n} | "
                     f"{r['same_first']} of {n} | {r['cited']} of {n} |")
    return "\n".join(lines) + "\n"


def render(result: dict, command: str, seconds: float) -> str:
    lines = ["## Which passages made the answer: context attribution and attention sorting (`bench/context.py "
             "--task attribution`)", "",
             f"Command: `{command}` ({seconds:.0f} s). SmolLM2-135M on 2 cores; {result['questions']} questions per "
             f"row ({result['split']} claims of SciFact); the model's own greedy answer attributed. Drops: the "
             "answer's log-probability with every passage less without the top-k scored (ContextCite's metric; "
             "larger is better). Gold first: the planted passage (or a gold evidence abstract) ranked first. Nothing "
             "was tuned on this split.", "",
             "| set | N | method | top-1 drop | top-3 drop | gold first | forward passes / question | "
             "seconds / question |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['set']} | {r['passages']} | {r['method']} | {r['top1']:+.3f} | {r['top3']:+.3f} | "
                     f"{r['gold_first']:.0%} | {r['passes']:.0f} | {r['seconds']:.2f} |")
    if result.get("prefix_reads"):
        lines += ["", f"`loo` with the prefix cache reads {result['prefix_reads']:.2f}x fewer tokens than recomputing "
                  f"every context at N = {result['sweep_passages']} (each context with a passage left out shares only "
                  "the tokens before that passage): the ceiling of its speed-up where a pass costs in proportion to "
                  "its tokens, whatever the implementation."]
    if result["parity"]:
        lines += ["", "context-cite 0.0.4 on the same planted-fact answers (its cached output set to them; its own "
                  "masks, forward passes and Lasso, in `.venv-contextcite`):", "",
                  "| ablations | largest weight difference from `contextcite` | answers compared | top-1 drop | "
                  "top-3 drop | gold first | seconds / question (with its model load) |",
                  "|---:|---:|---:|---:|---:|---:|---:|"]
        for p in result["parity"]:
            lines.append(f"| {p['ablations']} | {p['largest']:.1e} | {p['compared']} | {p['top1']:+.3f} | "
                         f"{p['top3']:+.3f} | {p['gold_first']:.0%} | {p['seconds']:.1f} |")
    if result.get("log_prob_parity"):
        p = result["log_prob_parity"]
        lines += ["", f"The answers' log-probabilities (ContextCite's top-k drop is their difference) with 0 to 3 "
                  f"passages removed, by context-cite 0.0.4's own code and by salience's, both in float64 "
                  f"(context-cite under torch's float64 default dtype; as it ships it sums float32 per-token "
                  f"logit differences, about 1e-5 off): {p['masks']} contexts, largest difference "
                  f"{p['largest']:.1e} (relative {p['relative']:.1e})."]
    if result["sorting"]:
        lines += ["", "Attention sorting (one round), answers holding the planted code: " + "; ".join(
            f"{s['order']} {s['accuracy']:.0%}" for s in result["sorting"]) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="test", choices=("dev", "test"), help="SciFact split (default test)")
    parser.add_argument("--questions", type=int, default=6, help="questions per row (default 6)")
    parser.add_argument("--passages", type=int, nargs="+", default=[5, 10, 20], help="context sizes N (default 5 10 20)")
    parser.add_argument("--sweep-passages", type=int, default=10,
                        help="the N at which every method and ablation budget runs (default 10)")
    parser.add_argument("--evidence-passages", type=int, default=10, help="N of the SciFact evidence set (default 10)")
    parser.add_argument("--sort-passages", type=int, default=20, help="N for attention sorting (default 20)")
    parser.add_argument("--contextcite-python", default=None,
                        help="python of an environment with context-cite 0.0.4 (make .venv-contextcite/bin/python)")
    parser.add_argument("--ablations", type=int, nargs="+", default=[32, 64, 256],
                        help="contextcite's ablation budgets at --sweep-passages (default 32 64 256)")
    parser.add_argument("--peer-ablations", type=int, nargs="+", default=[32, 64, 256],
                        help="context-cite's ablation budgets (default 32 64 256)")
    parser.add_argument("--task", default="attribution", choices=("attribution", "answer"),
                        help="attribution: the context methods, context-cite and attention sorting; answer: the "
                             "answer path's seconds (each its own section)")
    parser.add_argument("--answer-questions", type=int, default=20, help="questions of the answer task (default 20)")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"],
                        help="the weights the answer task loads the model in (default float32 bfloat16)")
    task = parser.parse_known_args(argv)[0].task
    if task == "answer":
        return run_benchmark("context.py", parser, _answer_path, render_answer_path, argv, variant="answer")
    return run_benchmark("context.py", parser, run, render, argv)


if __name__ == "__main__":
    sys.exit(main())
