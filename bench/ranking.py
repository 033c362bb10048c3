"""Ranking machinery benchmark: sorting with a noisy, position-biased judge (simulation), and
fusion plus judge-based reranking on SciFact.

Part 1 simulates a known true order of n items (n = 20, 50, 100) and judges that err:
* pairwise: answers the wrong way with probability `error`, and with probability `bias`
  simply prefers whichever item is shown first;
* listwise: sorts by true score plus Gaussian noise whose spread grows with the list length
  (long prompts degrade), plus a bonus for items shown early (position bias).
The first-stage order is the truth plus heavy noise. Reported: Kendall tau to the truth,
nDCG@10 (gain 10 - true rank for the true top 10), and judge calls, averaged over seeds.

Part 2 fuses BM25 variants on ../shared/data/search/scifact (quality, and speed side by side
with ranx.fuse on the same runs) and reranks BM25's top 100 with a noisy ScorerJudge built on a
different scorer (BM25 plus half the classic TF-IDF score, plus Gaussian noise on every call, so
that the sorting algorithms are told apart), reporting nDCG@10 before and after and the judge
calls per query.

    python bench/ranking.py --write BENCHMARKS.md
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
from common import search_set, split_heading, write_section  # noqa: E402

from salience import ListwiseJudge, PairwiseJudge, Run, ScorerJudge, evaluate, fuse, kendall_tau  # noqa: E402
from salience.core import sort  # noqa: E402
from salience.core.base import method_names  # noqa: E402

AGG_LABEL = {"borda": "Borda", "copeland": "Copeland", "kemeny": "Kemeny", "mc4": "MC4", "pagerank": "PageRank",
             "winrate": "winrate", "bradley_terry": "Bradley-Terry"}
from salience.core.scores import Scores  # noqa: E402
from salience.search import BM25  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "search"


# ------------------------------------------------------------------------------------------
# simulation
class World:
    def __init__(self, n: int, seed: int, error: float, bias: float, noise: float):
        self.n = n
        self.rng = np.random.default_rng(seed)
        self.true = {i: float(n - i) for i in range(n)}  # item i has true rank i
        self.error, self.bias, self.noise = error, bias, noise
        first_stage = np.arange(n) + self.rng.normal(0, n / 3, n)
        self.initial = [int(i) for i in np.argsort(first_stage, kind="stable")]

    def pairwise(self, query, a, b):
        if self.rng.random() < self.bias:
            return True  # position bias: the first shown wins
        correct = self.true[a] > self.true[b]
        return (not correct) if self.rng.random() < self.error else correct

    def listwise(self, query, items):
        m = len(items)
        spread = self.noise * self.n * np.sqrt(m / 20.0)
        position_bonus = self.bias * self.n * (1 - np.arange(m) / max(m - 1, 1))
        perceived = np.array([self.true[i] for i in items]) + self.rng.normal(0, spread, m) + position_bonus
        return [items[i] for i in np.argsort(-perceived, kind="stable")]

    def quality(self, result: Scores) -> tuple[float, float]:
        truth = Scores([self.true[i] for i in result.ids], ids=result.ids)
        tau = kendall_tau(result, truth)
        ranked = result.ranked_ids()[:10]
        dcg = sum(max(0, 10 - i) / np.log2(r + 2) for r, i in enumerate(ranked))
        ideal = sum((10 - r) / np.log2(r + 2) for r in range(10))
        return tau, dcg / ideal


def simulated_methods(n: int):
    pair = lambda w, **kw: PairwiseJudge(w.pairwise, **kw)  # noqa: E731
    lst = lambda w: ListwiseJudge(w.listwise)  # noqa: E731
    methods = {
        "first stage (no judge)": ("none", None),
        "one listwise call, full list": ("list", lambda w, j: Scores(np.arange(n, 0, -1.0), ids=j.rank(None, w.initial))),
        "sliding window 20/10": ("list", lambda w, j: sort.sliding_window(w.initial, j, window=20, stride=10)),
        "sliding window 20/10, 2 passes": ("list", lambda w, j: sort.sliding_window(w.initial, j, window=20, stride=10, passes=2)),
        "setwise top-10 (sets of 4)": ("list", lambda w, j: sort.setwise_top_k(w.initial, j, k=10, set_size=4)),
        "JointRank 20x2, PageRank": ("list", lambda w, j: sort.jointrank(w.initial, j, block_size=20, repetitions=2, aggregate_with="pagerank", seed=1)),
        **{
            f"JointRank 20x3, {AGG_LABEL[a]}": ("list", lambda w, j, a=a: sort.jointrank(w.initial, j, block_size=20, repetitions=3, aggregate_with=a, seed=1))
            for a in method_names("aggregate")
        },
        **{
            f"PSC 5 shuffles, {AGG_LABEL[a]}": ("list", lambda w, j, a=a: sort.permutation_self_consistency(w.initial, j, shuffles=5, aggregate_with=a, seed=1))
            for a in method_names("aggregate")
        },
        "heapsort top-10, both orders": ("pair", lambda w, j: sort.heapsort_top_k(w.initial, j, k=10)),
        "bubble top-10, both orders": ("pair", lambda w, j: sort.bubble_top_k(w.initial, j, k=10)),
        "PRP-allpairs, both orders": ("pair", lambda w, j: sort.allpairs(w.initial, j)),
    }
    if n <= 50:
        methods["TSP order (all pairs), both orders"] = ("pair", lambda w, j: sort.tsp_order(w.initial, j, exact_max=12))
    return methods, pair, lst


def run_simulation(sizes, seeds, error, bias, noise) -> list[dict]:
    rows = []
    for n in sizes:
        methods, pair, lst = simulated_methods(n)
        for name, (kind, fn) in methods.items():
            taus, ndcgs, calls = [], [], []
            start = time.perf_counter()
            for seed in range(seeds):
                world = World(n, seed, error, bias, noise)
                if kind == "none":
                    result, used = Scores(np.arange(n, 0, -1.0), ids=world.initial), 0
                else:
                    judge = pair(world, both_orders=True) if kind == "pair" else lst(world)
                    result = fn(world, judge)
                    used = judge.calls
                tau, ndcg = world.quality(result)
                taus.append(tau)
                ndcgs.append(ndcg)
                calls.append(used)
            rows.append({"n": n, "method": name, "kendall_tau": float(np.mean(taus)), "ndcg@10": float(np.mean(ndcgs)),
                         "calls": float(np.mean(calls)), "seconds": (time.perf_counter() - start) / seeds})
            print(f"  n={n:<4} {name:<36} tau {np.mean(taus):.3f}  nDCG@10 {np.mean(ndcgs):.3f}  calls {np.mean(calls):.0f}",
                  file=sys.stderr, flush=True)
    return rows


# ------------------------------------------------------------------------------------------
# real data
def fusion_speed(runs: list, repeats: int = 5) -> list[dict]:
    """Seconds per fusion of the same runs by salience and by ranx (best of ``repeats``, after
    one warm-up call each: ranx compiles its numba kernels on first use), and the largest
    per-item score difference between the two."""
    try:
        import ranx
    except ImportError:
        return []
    ranx_runs = [ranx.Run(r.to_dict()) for r in runs]
    rows = []
    for method, normalize, ranx_method, ranx_norm in (("rrf", None, "rrf", None), ("combsum", "minmax", "sum", "min-max"),
                                                      ("combmnz", "zscore", "mnz", "zmuv"), ("borda", None, "bordafuse", None)):
        ours = lambda: fuse(runs, method=method, **({"normalize": normalize} if normalize else {}))  # noqa: E731
        theirs = lambda: ranx.fuse(ranx_runs, method=ranx_method, norm=ranx_norm)  # noqa: E731
        a, b = ours(), theirs()
        times = {}
        for label, call in (("salience", ours), ("ranx", theirs)):
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                call()
                best = min(best, time.perf_counter() - start)
            times[label] = best
        b = b.to_dict()
        # ranx orders tied scores with an unstable sort: compare the subjects without ties
        clean = [q for q in a if all(len(set(r[q].values.tolist())) == len(r[q]) for r in runs)]
        diff = max((abs(v - b[q][d]) for q in clean for d, v in a[q].to_dict().items()), default=0.0)
        rows.append({"fusion": f"{method}" + (f", {normalize}" if normalize else ""), "salience_s": times["salience"],
                     "ranx_s": times["ranx"], "max_diff": diff, "compared": len(clean), "subjects": len(a)})
    return rows


class NoisyScorer:
    """The judge's scorer with Gaussian noise on every call: ``noise`` times the spread of the
    clean scores over the query's first-stage candidates (seeded, so runs repeat)."""

    def __init__(self, scorer, spreads: dict, noise: float, seed: int):
        self.scorer, self.spreads, self.noise = scorer, spreads, noise
        self.rng = np.random.default_rng(seed)

    def __call__(self, query, ids):
        clean = self.scorer(query, ids)
        return clean + self.rng.normal(0.0, self.noise * self.spreads[query], len(ids))


def run_real(root: Path, depth: int = 100, noise: float = 0.5) -> tuple[list[dict], list[dict], list[dict]]:
    corpus, queries, qrels = search_set(root, "test")  # nothing here is tuned: the test split's queries
    metric = lambda run: evaluate(qrels, run, ["ndcg@10", "recall@100"]).means  # noqa: E731
    runs = {}
    fusion_rows = []
    for variant in ("lucene", "bm25+", "bm25l", "atire", "tfidf"):
        runs[variant] = BM25(variant=variant).index(corpus).retrieve(queries, k=depth)
        fusion_rows.append({"run": f"BM25 {variant}", **metric(runs[variant])})
    bm25_runs = [runs[v] for v in ("lucene", "bm25+", "bm25l", "atire")]
    for label, kwargs in (
        ("RRF (k=60) of 4 BM25 variants", {"method": "rrf"}),
        ("CombSUM, min-max, of 4 BM25 variants", {"method": "combsum", "normalize": "minmax"}),
        ("CombMNZ, z-score, of 4 BM25 variants", {"method": "combmnz", "normalize": "zscore"}),
        ("Borda of 4 BM25 variants", {"method": "borda"}),
        ("RRF of BM25 lucene + TF-IDF", {"method": "rrf", "runs": [runs["lucene"], runs["tfidf"]]}),
    ):
        chosen = kwargs.pop("runs", bm25_runs)
        fusion_rows.append({"run": label, **metric(fuse(chosen, **kwargs))})
    speed_rows = fusion_speed(bm25_runs)

    lucene, tfidf = BM25().index(corpus), BM25(variant="tfidf").index(corpus)

    def other_scorer(query, ids):  # a different scorer: BM25 plus half the classic TF-IDF score
        return lucene.score(query, ids).values + 0.5 * tfidf.score(query, ids).values

    first = runs["lucene"]
    spreads = {queries[q]: float(np.std(other_scorer(queries[q], first[q].ids))) or 1.0 for q in first}
    rerank_rows = [{"method": "BM25 lucene top-100 (no rerank)", **metric(first), "calls": 0.0}]
    oracle = Run({q: Scores(other_scorer(queries[q], first[q].ids), ids=first[q].ids) for q in first})
    rerank_rows.append({"method": "sort all 100 by the judge's scorer (reference)", **metric(oracle), "calls": 0.0})
    algorithms = {
        "heapsort top-10 (pairwise)": lambda items, j, q: sort.heapsort_top_k(items, j, k=10, query=q),
        "bubble top-10 (pairwise)": lambda items, j, q: sort.bubble_top_k(items, j, k=10, query=q),
        "sliding window 20/10 (listwise)": lambda items, j, q: sort.sliding_window(items, j, window=20, stride=10, query=q),
        "setwise top-10, sets of 4": lambda items, j, q: sort.setwise_top_k(items, j, k=10, set_size=4, query=q),
        "JointRank 20x3, PageRank": lambda items, j, q: sort.jointrank(items, j, block_size=20, repetitions=3, query=q),
        "PSC 5 shuffles of the top 20, Borda": lambda items, j, q: _psc_top(items, j, q),
    }
    for name, algorithm in algorithms.items():
        pairwise = "pairwise" in name
        results, calls = {}, []
        # the same noise stream for every algorithm; no cache, so a repeated question is asked again
        scorer_judge = ScorerJudge(NoisyScorer(other_scorer, spreads, noise, seed=0), temperature=0)
        for q in first:
            judge = (PairwiseJudge(scorer_judge.pairwise, cache=False) if pairwise
                     else ListwiseJudge(scorer_judge.listwise, cache=False))
            results[q] = algorithm(first[q].ids, judge, queries[q])
            calls.append(judge.calls)
        rerank_rows.append({"method": name, **metric(Run(results)), "calls": float(np.mean(calls))})
        print(f"  rerank {name:<40} nDCG@10 {rerank_rows[-1]['ndcg@10']:.4f} calls {np.mean(calls):.1f}", file=sys.stderr, flush=True)
    return fusion_rows, speed_rows, rerank_rows


def _psc_top(items, judge, query):
    top = sort.permutation_self_consistency(items[:20], judge, shuffles=5, aggregate_with="borda", query=query)
    return Scores(np.arange(len(items), 0, -1.0), ids=top.ranked_ids() + list(items[20:]))


# ------------------------------------------------------------------------------------------
def verdicts(rows) -> list[str]:
    """Compare PSC and JointRank with the cheapest sliding-window run that used at least as many calls."""
    out = []
    for n in sorted({r["n"] for r in rows}):
        by = {r["method"]: r for r in rows if r["n"] == n}
        windows = sorted((r for r in by.values() if r["method"].startswith("sliding window")), key=lambda r: r["calls"])
        for name in [m for m in by if m.startswith(("PSC", "JointRank"))]:
            r = by[name]
            fair = next((w for w in windows if w["calls"] >= r["calls"]), windows[-1])
            better = r["ndcg@10"] > fair["ndcg@10"]
            matched = r["calls"] <= fair["calls"]
            verdict = "yes" if better and matched else "no" if not better else "better, but with more calls than any window run"
            out.append(
                f"| {n} | {name} | {r['ndcg@10']:.3f} at {r['calls']:.0f} calls | {fair['method']}: {fair['ndcg@10']:.3f} at "
                f"{fair['calls']:.0f} calls | {verdict} |"
            )
    return out


def render(sim_rows, fusion_rows, speed_rows, rerank_rows, command, settings, noise) -> str:
    lines = ["## Ranking machinery (`bench/ranking.py`)", "", f"Command: `{command}`", "",
             f"### Sorting with a noisy judge (simulation; {settings})", "",
             "| n | method | Kendall tau | nDCG@10 | judge calls | seconds |", "|---:|---|---:|---:|---:|---:|"]
    for r in sim_rows:
        lines.append(f"| {r['n']} | {r['method']} | {r['kendall_tau']:.3f} | {r['ndcg@10']:.3f} | {r['calls']:.0f} | {r['seconds']:.3f} |")
    lines += ["", "Do permutation self-consistency and JointRank recover the top 10 better than sliding-window passes "
              "at equal or fewer calls, as their papers claim? Each is compared with the cheapest sliding-window run "
              "(1 or 2 passes) that used at least as many calls.", "",
              "| n | method | nDCG@10 at calls | sliding window compared | better at <= calls |", "|---:|---|---|---|---|"]
    lines += verdicts(sim_rows)
    if fusion_rows:
        lines += ["", f"### Fusion of BM25 runs on SciFact's {split_heading('test')} (top 100 each)", "", "| run | nDCG@10 | recall@100 |", "|---|---:|---:|"]
        lines += [f"| {r['run']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} |" for r in fusion_rows]
        if speed_rows:
            lines += ["", "Fusion speed on the same 4 runs (the test split's queries x 100 items each), salience `fuse` vs `ranx.fuse` "
                      "(best of 5 after a warm-up call; ranx compiles numba kernels on first use):", "",
                      "| fusion | salience ms | ranx ms | speed vs ranx | max score difference (subjects without ties) |",
                      "|---|---:|---:|---:|---:|"]
            lines += [f"| {r['fusion']} | {1000 * r['salience_s']:.1f} | {1000 * r['ranx_s']:.1f} | "
                      f"{r['ranx_s'] / r['salience_s']:.2f}x | {r['max_diff']:.1e} ({r['compared']} of {r['subjects']}) |"
                      for r in speed_rows]
        lines += ["", f"### Reranking BM25's top 100 on SciFact's {split_heading('test')} with a noisy ScorerJudge",
                  "", f"Judge: `ScorerJudge(scorer, temperature=0)` with scorer = BM25 score + 0.5 x classic TF-IDF score "
                  f"(a different scorer from the first stage, BM25 alone) plus Gaussian noise of {noise} x the spread of the "
                  "clean scores over the query's candidates, drawn anew on every call (no cache). The reference row sorts "
                  "by the clean scorer. Calls are per query; the pairwise and setwise methods sort only the top 10.", "",
                  "| method | nDCG@10 | recall@100 | judge calls |", "|---|---:|---:|---:|"]
        lines += [f"| {r['method']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | {r['calls']:.1f} |" for r in rerank_rows]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20,50,100")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--error", type=float, default=0.1, help="pairwise judge error rate")
    parser.add_argument("--bias", type=float, default=0.1, help="position bias (pairwise: rate; listwise: bonus scale)")
    parser.add_argument("--noise", type=float, default=0.08, help="listwise noise, in units of n, for 20 items")
    parser.add_argument("--rerank-noise", type=float, default=0.5,
                        help="judge noise on SciFact, in units of the clean scores' spread per query (default 0.5)")
    parser.add_argument("--skip-real", action="store_true")
    parser.add_argument("--write", type=Path, default=None)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    sim = run_simulation(sizes, args.seeds, args.error, args.bias, args.noise)
    fusion_rows, speed_rows, rerank_rows = ([], [], []) if args.skip_real else run_real(DATA / "scifact", noise=args.rerank_noise)
    command = "python bench/ranking.py " + " ".join(argv if argv is not None else sys.argv[1:])
    settings = f"pairwise error {args.error}, position bias {args.bias}, listwise noise {args.noise}, {args.seeds} seeds"
    section = render(sim, fusion_rows, speed_rows, rerank_rows, command.strip(), settings, args.rerank_noise)
    print(section)
    if args.write:
        write_section(args.write, section, marker="bench/ranking.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
