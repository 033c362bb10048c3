"""Data valuation and label-error detection, salience against pyDVL 0.10, cleanlab 2.9 and random,
in one run on the same games.

Data that ships here: scikit-learn's breast_cancer, wine and digits (standardised), the 2,000
movie reviews of ../shared/data/dsir (sentiment) and a domain-labelled sample of the DSIR pool
(six domains), both as TF-IDF reduced to 100 dimensions by truncated SVD. The peers run in
their own environment (pyDVL needs numpy < 2: ``make .venv-pydvl/bin/python``), driven through
bench/pydvl_runner.py; their time is measured inside it.

1. **KNN-Shapley** on 10^4 training rows (the DSIR pool, 14 domains; 1,000 test rows): the
   largest difference from pyDVL's ``KNNShapleyValuation`` and the speed ratio.
2. **Noisy-label detection**: 10% of each training set's labels flipped to another class; every
   method values the noisy rows, the lowest valued are the suspects: ROC AUC and precision at
   10% (the flipped share of the lowest 10%), model fits, seconds. Sampling methods at equal
   fits: pyDVL runs first with a number of samples, salience gets the fits pyDVL counted.
3. **Small games**: games of 10 training rows (breast_cancer; exact values by all 1,024 fits);
   TMC Shapley and Data Banzhaf of both libraries at equal fits; mean absolute error to exact.

No default was tuned here: TMC's truncation (1%) and Beta(16, 1) are the papers' and pyDVL's
choices, confident learning's 5 folds cleanlab's.

    python bench/valuation.py --write BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import gzip
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

from common import SHARED_DATA, run_benchmark  # noqa: E402

PYDVL_PYTHON = ROOT / ".venv-pydvl" / "bin" / "python"
DSIR_DOMAINS = 6


def _standardised(X):
    return (X - X.mean(axis=0)) / np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)


def _text_features(texts, dims: int = 100, seed: int = 0):
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    tfidf = TfidfVectorizer(min_df=2, sublinear_tf=True, max_features=50_000).fit_transform(texts)
    return _standardised(TruncatedSVD(dims, random_state=seed).fit_transform(tfidf))


def _pool(limit_per_domain: int | None = None, domains: int | None = None, seed: int = 0):
    """(texts, domain labels) of the DSIR pool; ``domains``: only the largest ones."""
    texts, labels = [], []
    with gzip.open(SHARED_DATA / "dsir" / "raw_docs.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            record = json.loads(line)
            texts.append(" ".join(record["text"].split()[:300]))
            labels.append(record["domain"])
    labels = np.array(labels)
    names, counts = np.unique(labels, return_counts=True)
    keep = set(names[np.argsort(-counts)][:domains]) if domains else set(names)
    rng = np.random.default_rng(seed)
    chosen = []
    for name in sorted(keep):
        rows = np.flatnonzero(labels == name)
        chosen += rng.permutation(rows)[: limit_per_domain or len(rows)].tolist()
    chosen = rng.permutation(chosen)
    return [texts[i] for i in chosen], labels[chosen]


def datasets(seed: int = 0) -> dict:
    from sklearn.datasets import load_breast_cancer, load_digits, load_wine

    out = {}
    for name, load in (("breast_cancer", load_breast_cancer), ("wine", load_wine), ("digits", load_digits)):
        X, y = load(return_X_y=True)
        out[name] = (_standardised(X.astype(float)), y)
    reviews, sentiment = [], []
    with gzip.open(SHARED_DATA / "dsir" / "raw_docs.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            if '"movie_' in line:
                record = json.loads(line)
                if record.get("subdomain") in ("movie_pos", "movie_neg"):
                    reviews.append(record["text"])
                    sentiment.append(int(record["subdomain"] == "movie_pos"))
    out["movie_reviews"] = (_text_features(reviews, seed=seed), np.array(sentiment))
    texts, domains = _pool(limit_per_domain=200, domains=DSIR_DOMAINS, seed=seed)
    out["dsir_domains"] = (_text_features(texts, seed=seed), domains)
    return out


def noisy_game(X, y, n_train: int, n_test: int, noise: float, seed: int):
    """Train and test rows, and the train labels with ``noise`` of them flipped to another class."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    train, test = order[:n_train], order[n_train : n_train + n_test]
    classes = np.unique(y)
    noisy = y[train].copy()
    flipped = rng.choice(n_train, int(round(noise * n_train)), replace=False)
    for i in flipped:
        noisy[i] = rng.choice(classes[classes != noisy[i]])
    mask = np.zeros(n_train, dtype=bool)
    mask[flipped] = True
    return (X[train], noisy), (X[test], y[test]), mask


def detection(values, flipped) -> dict:
    from sklearn.metrics import roc_auc_score

    values = np.asarray(values, dtype=float)
    lowest = np.argsort(values, kind="stable")[: max(1, int(flipped.sum()))]
    return {"auc": float(roc_auc_score(flipped, -values)), "precision": float(flipped[lowest].mean())}


def run_peers(jobs: list[dict], arrays: dict) -> list[dict]:
    if not PYDVL_PYTHON.exists():
        raise SystemExit(f"{PYDVL_PYTHON} is missing: run `make .venv-pydvl/bin/python` (pyDVL 0.10, cleanlab 2.9).")
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(Path(tmp) / "arrays.npz", **arrays)
        (Path(tmp) / "jobs.json").write_text(json.dumps({"arrays": str(Path(tmp) / "arrays.npz"), "jobs": jobs}))
        done = subprocess.run([str(PYDVL_PYTHON), str(ROOT / "bench" / "pydvl_runner.py"), str(Path(tmp) / "jobs.json"),
                               str(Path(tmp) / "out.json")], capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"the peers' runner failed:\n{done.stderr[-3000:]}")
        return json.loads((Path(tmp) / "out.json").read_text())


def _timed(scorer, train, test):
    start = time.perf_counter()
    values = scorer.score(train, test).values
    return values, time.perf_counter() - start, getattr(scorer, "fits_", 0), _rss_mb()


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def knn_speed(args) -> dict:
    from salience.data import KnnShapley

    texts, domains = _pool(seed=args.seed)
    X = _text_features(texts[: args.knn_train + 1000], dims=64, seed=args.seed)
    y = domains[: args.knn_train + 1000]
    train, test = (X[: args.knn_train], y[: args.knn_train]), (X[args.knn_train :], y[args.knn_train :])
    codes = {label: i for i, label in enumerate(np.unique(y))}
    arrays = {"knn_X_train": train[0], "knn_y_train": np.array([codes[v] for v in train[1]]),
              "knn_X_test": test[0], "knn_y_test": np.array([codes[v] for v in test[1]])}
    peer = run_peers([{"game": "knn", "library": "pydvl", "method": "knn_shapley", "model": "knn", "k": 10}], arrays)[0]
    values, seconds, _, peak = _timed(KnnShapley(k=10), (arrays["knn_X_train"], arrays["knn_y_train"]),
                                      (arrays["knn_X_test"], arrays["knn_y_test"]))
    return {"train": args.knn_train, "test": len(test[1]), "seconds": seconds, "peer_seconds": peer["seconds"],
            "max_difference": float(np.abs(values - np.array(peer["values"])).max()), "peak_mb": peak}


def detection_rows(args) -> list[dict]:
    from salience.core.base import create

    rows = []
    for name, (X, y) in datasets(args.seed).items():
        n_train = min(args.n_train, len(y) // 2)
        train, test, flipped = noisy_game(X, y, n_train, min(args.n_test, len(y) - n_train), 0.1, args.seed)
        codes = {label: i for i, label in enumerate(np.unique(y))}
        coded = lambda labels: np.array([codes[v] for v in labels])  # noqa: E731
        arrays = {f"{name}_X_train": train[0], f"{name}_y_train": coded(train[1]), f"{name}_X_test": test[0],
                  f"{name}_y_test": coded(test[1])}
        train, test = (train[0], coded(train[1])), (test[0], coded(test[1]))
        perms = max(1, args.budget // n_train)
        jobs = [{"game": name, "library": "pydvl", "method": "knn_shapley", "model": "knn", "k": 10},
                {"game": name, "library": "pydvl", "method": "loo"},
                {"game": name, "library": "pydvl", "method": "data_banzhaf", "samples": args.budget, "seed": args.seed},
                {"game": name, "library": "pydvl", "method": "tmc_shapley", "samples": perms, "truncation": 0.01,
                 "seed": args.seed},
                {"game": name, "library": "pydvl", "method": "beta_shapley", "samples": perms, "seed": args.seed},
                {"game": name, "library": "cleanlab", "method": "confident_learning", "folds": 5}]
        peers = {job["method"]: job for job in run_peers(jobs, arrays)}
        for method, options in (("knn_shapley", {"k": 10}), ("loo", {}),
                                ("data_banzhaf", {"budget": peers["data_banzhaf"]["fits"]}),
                                ("tmc_shapley", {"budget": max(n_train, peers["tmc_shapley"]["fits"]),
                                                 "truncation": 0.01}),
                                ("beta_shapley", {"budget": max(n_train, peers["beta_shapley"]["fits"]),
                                                  "truncation": None}),
                                ("confident_learning", {"folds": 5}), ("influence", {})):
            values, seconds, fits, peak = _timed(create("data", method, **options, **({"seed": args.seed} if
                                                 method in ("data_banzhaf", "tmc_shapley", "beta_shapley",
                                                            "confident_learning") else {})), train, test)
            rows.append({"set": name, "method": method, "library": "salience", "fits": fits, "seconds": seconds,
                         "peak_mb": peak, **detection(values, flipped)})
            peer = peers.get(method)
            if peer is not None:
                if method in ("knn_shapley", "loo"):  # the same values, computed two ways
                    rows[-1]["max_difference"] = float(np.abs(values - np.array(peer["values"])).max())
                rows.append({"set": name, "method": method, "library": peer["library"], "fits": peer["fits"],
                             "seconds": peer["seconds"], "peak_mb": None, **detection(peer["values"], flipped)})
        random = np.random.default_rng(args.seed).random(len(flipped))
        rows.append({"set": name, "method": "random", "library": "", "fits": 0, "seconds": 0.0, "peak_mb": None,
                     **detection(random, flipped)})
        print(f"{name} done", file=sys.stderr, flush=True)
    return rows


def small_games(args) -> list[dict]:
    from sklearn.datasets import load_breast_cancer

    from salience.data import DataBanzhaf, TmcShapley
    from salience.data.valuation import exact_values

    X, y = load_breast_cancer(return_X_y=True)
    X = _standardised(X)
    rng = np.random.default_rng(args.seed)
    errors = {}
    for game in range(args.games):
        order = rng.permutation(len(y))
        train, test = (X[order[:10]], y[order[:10]]), (X[order[10:110]], y[order[10:110]])
        arrays = {"g_X_train": train[0], "g_y_train": train[1], "g_X_test": test[0], "g_y_test": test[1]}
        exact = {kind: exact_values(train, test, kind=kind).values for kind in ("shapley", "banzhaf")}  # 2 x 1,024 fits
        jobs = [{"game": "g", "library": "pydvl", "method": "tmc_shapley", "samples": args.game_perms,
                 "truncation": 0.01, "seed": game},
                {"game": "g", "library": "pydvl", "method": "data_banzhaf", "samples": args.game_perms * 10,
                 "seed": game}]
        for peer in run_peers(jobs, arrays):
            kind = "shapley" if peer["method"] == "tmc_shapley" else "banzhaf"
            cls = TmcShapley if kind == "shapley" else DataBanzhaf
            ours = cls(budget=max(10, peer["fits"]), seed=game).score(train, test).values
            for library, values, fits in (("pydvl", np.array(peer["values"]), peer["fits"]),
                                          ("salience", ours, peer["fits"])):
                errors.setdefault((peer["method"], library), []).append(
                    (float(np.abs(values - exact[kind]).mean()), fits))
    return [{"method": method, "library": library, "games": len(v), "mean_abs_error": float(np.mean([e for e, _ in v])),
             "fits": float(np.mean([f for _, f in v]))} for (method, library), v in errors.items()]


def run(args) -> dict:
    return {"knn": knn_speed(args), "detection": detection_rows(args), "games": small_games(args)}


def render(result: dict, command: str, seconds: float) -> str:
    knn = result["knn"]
    lines = ["## Data valuation: salience against pyDVL 0.10, cleanlab 2.9 and random", "",
             f"`{command}` ({seconds / 60:.0f} minutes, 2 cores; peers in .venv-pydvl, timed inside their runner).", "",
             f"**KNN-Shapley, {knn['train']:,} training rows, {knn['test']:,} test rows** (DSIR pool, 64-dimensional "
             f"TF-IDF + SVD, k = 10): salience {knn['seconds']:.2f} s, pyDVL {knn['peer_seconds']:.2f} s "
             f"(**{knn['peer_seconds'] / knn['seconds']:.0f}x**); largest difference {knn['max_difference']:.1e}; "
             f"peak RSS of the whole run {knn['peak_mb']:.0f} MB.", "",
             "**Noisy-label detection** (10% of training labels flipped; the lowest valued are the suspects; AUC and "
             "precision at 10%; sampling methods at pyDVL's counted fits):", "",
             "| set | method | library | fits | seconds | AUC | precision@10% | largest difference from pyDVL |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in result["detection"]:
        difference = f"{r['max_difference']:.1e}" if "max_difference" in r else ""
        lines.append(f"| {r['set']} | {r['method']} | {r['library']} | {r['fits']} | {r['seconds']:.2f} | "
                     f"{r['auc']:.3f} | {r['precision']:.3f} | {difference} |")
    lines += ["", "**Small games** (10 breast_cancer rows, 100 test rows; exact values from all 1,024 fits; equal "
              "fits per game):", "", "| method | library | games | mean fits | mean absolute error to exact |",
              "|---|---|---:|---:|---:|"]
    for r in result["games"]:
        lines.append(f"| {r['method']} | {r['library']} | {r['games']} | {r['fits']:.0f} | {r['mean_abs_error']:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-train", type=int, default=200, help="training rows per noisy-label game")
    parser.add_argument("--n-test", type=int, default=300, help="test rows per noisy-label game")
    parser.add_argument("--budget", type=int, default=2000, help="fits of the sampling methods (about)")
    parser.add_argument("--knn-train", type=int, default=10_000)
    parser.add_argument("--games", type=int, default=20, help="small games for the agreement with exact values")
    parser.add_argument("--game-perms", type=int, default=10, help="TMC permutations per small game (Banzhaf: 10x)")
    parser.add_argument("--seed", type=int, default=0)
    return run_benchmark("valuation.py", parser, run, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
