"""Data valuation and label-error detection, salience against pyDVL 0.10, cleanlab 2.9 and random,
in one run on the same games.

Data that ships here: scikit-learn's breast_cancer, wine and digits (standardised), the 2,000
movie reviews of ../shared/data/dsir (sentiment) and a domain-labelled sample of the DSIR pool
(six domains), both as TF-IDF reduced to 100 dimensions by truncated SVD. The peers run in
their own environment (pyDVL needs numpy < 2: ``make .venv-pydvl/bin/python``), driven through
bench/pydvl_runner.py; their time is measured inside it.

1. **KNN-Shapley** on 10^4 training rows (the DSIR pool, 14 domains; 1,000 test rows): the
   largest difference from pyDVL's ``KNNShapleyValuation`` and the speed ratio.
2. **Noisy-label detection**, over several seeds (each seed draws its own train/test split and
   flips): 10% of each training set's labels flipped to another class; every method scores the
   noisy rows and its suspects (the lowest values; the highest difficulty for EL2N, GraNd and
   forgetting) are ranked first: ROC AUC and precision at 10% (the flipped share of the first
   10%), model fits, seconds, as mean and standard deviation over the seeds. Sampling methods at
   equal fits: pyDVL runs first with a number of samples, salience gets the fits pyDVL counted.
3. **Point removal**: on the same games, the training rows removed from the highest valued down
   (and from the lowest up), 10-50%, a logistic regression refitted on the rest: test accuracy,
   mean over sets and seeds. Good values make accuracy fall fast when the highest go, and hold
   or rise when the lowest go.
4. **Small games**: games of 10 training rows (breast_cancer and wine; exact values from all
   1,024 fits); TMC Shapley and Data Banzhaf of both libraries at equal fits; mean absolute error
   to exact. The games are drawn with ``--game-seed`` (default 1): Data Banzhaf's regression
   estimator was chosen on breast_cancer games of seed 0, which are not reported.

No default was tuned on these games: TMC's truncation (1%) and Beta(16, 1) are the papers' and
pyDVL's choices, confident learning's 5 folds cleanlab's; antithetic walks (``--walks-dev``) and
confident learning's 5-neighbour vote (``--label-errors``) were chosen on three other sets (iris,
the DSIR pool's smaller domains, a synthetic set); the training-dynamics scores run at
their defaults (SGD logistic regression, 10 epochs, 3 seeds, EL2N / GraNd read at epoch 2),
set a priori from the papers' early-training reading, not searched.

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
    """AUC and precision at the flipped share, the lowest of ``values`` the suspects."""
    from sklearn.metrics import roc_auc_score

    values = np.asarray(values, dtype=float)
    lowest = np.argsort(values, kind="stable")[: max(1, int(flipped.sum()))]
    return {"auc": float(roc_auc_score(flipped, -values)), "precision": float(flipped[lowest].mean())}


REMOVED = (0.1, 0.2, 0.3, 0.4, 0.5)


def removal_curves(values, train, test) -> dict:
    """Test accuracy of a logistic regression refitted after removing the highest (and the
    lowest) valued share of the training rows, for each share in REMOVED."""
    from sklearn.linear_model import LogisticRegression

    order = np.argsort(-np.asarray(values, dtype=float), kind="stable")  # highest valued first
    curves = {"highest": [], "lowest": []}
    for share in REMOVED:
        cut = int(round(share * len(order)))
        for end, kept in (("highest", order[cut:]), ("lowest", order[: len(order) - cut])):
            if len(np.unique(train[1][kept])) < 2:
                curves[end].append(float(np.mean(test[1] == np.bincount(train[1][kept]).argmax())))
                continue
            model = LogisticRegression(max_iter=1000).fit(train[0][kept], train[1][kept])
            curves[end].append(float(model.score(*test)))
    return curves


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
    """KNN-Shapley at ``--knn-train`` rows against pyDVL, twice: on the pool as drawn, and on the
    pool with repeated feature rows dropped (a repeated row at the same distance from every test
    row with another label has no order of its own: either is right, and the two libraries'
    scikit-learn versions break such ties differently)."""
    texts, domains = _pool(seed=args.seed)
    spare = 2 * args.knn_train // 100 + 1000  # room for the repeated rows the distinct run drops
    X = _text_features(texts[: args.knn_train + spare + 1000], dims=64, seed=args.seed)
    y = domains[: len(X)]
    codes = {label: i for i, label in enumerate(np.unique(y))}
    y = np.array([codes[v] for v in y])
    test = (X[-1000:], y[-1000:])
    pool = X[:-1000]
    _, first = np.unique(pool, axis=0, return_index=True)
    distinct = np.sort(first)[: args.knn_train]
    repeated = len(pool[: args.knn_train]) - len(np.unique(pool[: args.knn_train], axis=0))
    out = {"train": args.knn_train, "test": len(test[1]), "repeated_rows": int(repeated)}
    for name, rows in (("drawn", np.arange(args.knn_train)), ("distinct", distinct)):
        out[name] = _knn_against_pydvl((pool[rows], y[rows]), test)
    return out


def _knn_against_pydvl(train, test) -> dict:
    from salience.data import KnnShapley

    arrays = {"knn_X_train": train[0], "knn_y_train": train[1], "knn_X_test": test[0], "knn_y_test": test[1]}
    peer = run_peers([{"game": "knn", "library": "pydvl", "method": "knn_shapley", "model": "knn", "k": 10}], arrays)[0]
    values, seconds, _, peak = _timed(KnnShapley(k=10), train, test)
    return {"seconds": seconds, "peer_seconds": peer["seconds"],
            "max_difference": float(np.abs(values - np.array(peer["values"])).max()), "peak_mb": peak}


DYNAMICS = ("el2n", "grand", "forgetting", "aum")
#: TracIn's two readings, a stage of their own (added after the detection stage was measured)
TRACIN = ("tracin", "tracin_self")


def detection_rows(args) -> list[dict]:
    rows = []
    sets = datasets(args.seed)
    for seed in args.seeds:
        for name, (X, y) in sets.items():
            rows += _detection_game(args, name, X, y, seed)
            print(f"{name} seed {seed} done", file=sys.stderr, flush=True)
    return rows


def tracin_rows(args) -> list[dict]:
    """TracIn (against the test rows) and TracIn self-influence on the detection stage's games."""
    rows = []
    sets = datasets(args.seed)
    for seed in args.seeds:
        for name, (X, y) in sets.items():
            train, test, flipped, _ = _noisy_coded_game(args, X, y, seed)
            rows += _salience_rows(name, seed, [(method, {"seed": seed}) for method in TRACIN], train, test, flipped, {})
            print(f"tracin: {name} seed {seed} done", file=sys.stderr, flush=True)
    return rows


#: confident learning's neighbour vote: the sizes tried on the dev sets (None: cleanlab's score alone)
NEIGHBOR_CHOICES = (None, 5, 10, 20)
NEIGHBORS = 5  # chosen on the dev sets (label_error_rows)


def dev_sets(seed: int = 0) -> dict:
    """Sets no reported table uses, for choices: iris, the DSIR pool's domains beyond the six of
    ``dsir_domains``, and a synthetic four-class set."""
    from sklearn.datasets import load_iris, make_classification

    X, y = load_iris(return_X_y=True)
    out = {"iris": (_standardised(X), y)}
    texts, labels = _pool(limit_per_domain=200, seed=seed)
    names, counts = np.unique(labels, return_counts=True)
    reported = set(names[np.argsort(-counts)][:DSIR_DOMAINS])
    rest = np.array([label not in reported for label in labels])
    out["dsir_other_domains"] = (_text_features([t for t, r in zip(texts, rest) if r], seed=seed), labels[rest])
    X, y = make_classification(600, 20, n_informative=8, n_classes=4, n_clusters_per_class=2, random_state=seed)
    out["synthetic"] = (_standardised(X), y)
    return out


def _neighbors_label(k) -> str:
    return "confident_learning" if k is None else f"confident_learning + {k} neighbours"


def label_error_rows(args) -> dict:
    """Confident learning with and without the neighbour vote: its size chosen on the dev sets
    (five seeds each), then the chosen one beside cleanlab on the reported sets' games."""
    dev = []
    for name, (X, y) in dev_sets(args.seed).items():
        for seed in range(5):
            train, test, flipped, _ = _noisy_coded_game(args, X, y, seed)
            methods = [("confident_learning", {"folds": 5, "seed": seed, "neighbors": k}, _neighbors_label(k))
                       for k in NEIGHBOR_CHOICES]
            dev += _salience_rows(name, seed, methods, train, test, flipped, {})
    test_rows = []
    for seed in args.seeds:
        for name, (X, y) in datasets(args.seed).items():
            train, test, flipped, _ = _noisy_coded_game(args, X, y, seed)
            arrays = {f"{name}_X_train": train[0], f"{name}_y_train": train[1], f"{name}_X_test": test[0],
                      f"{name}_y_test": test[1]}
            peers = {job["method"]: job for job in run_peers(
                [{"game": name, "library": "cleanlab", "method": "confident_learning", "folds": 5}], arrays)}
            methods = [("confident_learning", {"folds": 5, "seed": seed, "neighbors": k}, _neighbors_label(k))
                       for k in (None, NEIGHBORS)]
            test_rows += _salience_rows(name, seed, methods, train, test, flipped, peers)
            print(f"label errors: {name} seed {seed} done", file=sys.stderr, flush=True)
    return {"dev": dev, "test": test_rows}


def walk_choice_rows(args) -> list[dict]:
    """TMC and Beta Shapley with plain and antithetic walks against pyDVL's, at pyDVL's counted
    fits (10 permutations), on the dev sets, seeds 0-2: where ``antithetic=True`` was chosen."""
    from salience.data import BetaShapley, TmcShapley

    rows = []
    for name, (X, y) in dev_sets(args.seed).items():
        for seed in range(3):
            train, test, flipped, n_train = _noisy_coded_game(args, X, y, seed)
            arrays = {f"{name}_X_train": train[0], f"{name}_y_train": train[1], f"{name}_X_test": test[0],
                      f"{name}_y_test": test[1]}
            jobs = [{"game": name, "library": "pydvl", "method": "tmc_shapley", "samples": 10, "truncation": 0.01,
                     "seed": seed}, {"game": name, "library": "pydvl", "method": "beta_shapley", "samples": 10,
                                     "seed": seed}]
            for peer in run_peers(jobs, arrays):
                rows.append({"set": name, "seed": seed, "method": peer["method"], "walks": "pyDVL",
                             "fits": peer["fits"], "auc": detection(np.array(peer["values"]), flipped)["auc"]})
                for antithetic in (False, True):
                    options = {"budget": max(n_train, peer["fits"]), "seed": seed, "antithetic": antithetic}
                    scorer = TmcShapley(truncation=0.01, **options) if peer["method"] == "tmc_shapley" else \
                        BetaShapley(truncation=None, **options)
                    values = scorer.score(train, test).values
                    rows.append({"set": name, "seed": seed, "method": peer["method"],
                                 "walks": "antithetic" if antithetic else "plain", "fits": scorer.fits_,
                                 "auc": detection(values, flipped)["auc"]})
            print(f"walks: {name} seed {seed} done", file=sys.stderr, flush=True)
    return rows


def render_walk_choice(rows: list[dict], command: str, seconds: float) -> str:
    sets = list(dict.fromkeys(r["set"] for r in rows))
    lines = ["## Permutation walks: plain or antithetic, chosen on dev sets (TMC and Beta Shapley against pyDVL)", "",
             f"`{command}` ({seconds / 60:.0f} minutes, 2 cores). Noisy-label detection AUC, mean over seeds 0-2, "
             "on sets no reported table uses; salience at pyDVL's counted fits (10 permutations). Walks cut short "
             "by the budget are dropped in both salience rows (before this choice, salience averaged their first "
             "rows in, which skewed those rows toward small coalitions).", "",
             "| method | walks | " + " | ".join(sets) + " |", "|---|---|" + "---:|" * len(sets)]
    for key, group in _grouped(rows, ("method", "walks")).items():
        by_set = _grouped(group, ("set",))
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(
            f"{np.mean([r['auc'] for r in by_set[(name,)]]):.3f}" for name in sets) + " |")
    return "\n".join(lines) + "\n"


def _noisy_coded_game(args, X, y, seed) -> tuple:
    """(train, test, flipped, n_train) of one noisy game, labels coded 0..K-1."""
    n_train = min(args.n_train, len(y) // 2)
    train, test, flipped = noisy_game(X, y, n_train, min(args.n_test, len(y) - n_train), 0.1, seed)
    codes = {label: i for i, label in enumerate(np.unique(y))}
    return (train[0], _coded(train[1], codes)), (test[0], _coded(test[1], codes)), flipped, n_train


def _salience_rows(name, seed, methods, train, test, flipped, peers) -> list[dict]:
    """Each salience method's detection scores and removal curves (values oriented so that
    higher means more helpful), with its peer's beside it where ``peers`` has one."""
    from salience.core.base import create

    rows = []

    def add(method, library, values, fits, seconds, peak=None, **extra):
        rows.append({"set": name, "seed": seed, "method": method, "library": library, "fits": fits,
                     "seconds": seconds, "peak_mb": peak, **detection(values, flipped),
                     "removal": removal_curves(values, train, test), **extra})

    for method, options, *label in methods:  # a third item labels a method's non-default configuration
        label = label[0] if label else method
        scorer = create("valuation", method, **options)
        values, seconds, fits, peak = _timed(scorer, train, test)
        oriented = values if scorer.suspects == "lowest" else -values
        extra = {}
        peer = peers.get(label)
        if peer is not None and method in ("knn_shapley", "loo"):  # the same values, computed two ways
            extra["max_difference"] = float(np.abs(values - np.array(peer["values"])).max())
        add(label, "salience", oriented, fits, seconds, peak, **extra)
        if peer is not None:
            add(method, peer["library"], np.array(peer["values"]), peer["fits"], peer["seconds"])
    return rows


def _detection_game(args, name, X, y, seed) -> list[dict]:
    """One noisy game of one set: every method of both libraries, its detection scores and
    removal curves, and random's."""
    train, test, flipped, n_train = _noisy_coded_game(args, X, y, seed)
    arrays = {f"{name}_X_train": train[0], f"{name}_y_train": train[1], f"{name}_X_test": test[0],
              f"{name}_y_test": test[1]}
    perms = max(1, args.budget // n_train)
    jobs = [{"game": name, "library": "pydvl", "method": "knn_shapley", "model": "knn", "k": 10},
            {"game": name, "library": "pydvl", "method": "loo"},
            {"game": name, "library": "pydvl", "method": "data_banzhaf", "samples": args.budget, "seed": seed},
            {"game": name, "library": "pydvl", "method": "tmc_shapley", "samples": perms, "truncation": 0.01,
             "seed": seed},
            {"game": name, "library": "pydvl", "method": "beta_shapley", "samples": perms, "seed": seed},
            {"game": name, "library": "cleanlab", "method": "confident_learning", "folds": 5}]
    peers = {job["method"]: job for job in run_peers(jobs, arrays)}
    methods = [("knn_shapley", {"k": 10}), ("loo", {}),
               ("data_banzhaf", {"budget": peers["data_banzhaf"]["fits"], "seed": seed}),
               ("tmc_shapley", {"budget": max(n_train, peers["tmc_shapley"]["fits"]), "truncation": 0.01,
                                "seed": seed}),
               ("beta_shapley", {"budget": max(n_train, peers["beta_shapley"]["fits"]), "truncation": None,
                                 "seed": seed}),
               ("confident_learning", {"folds": 5, "seed": seed}), ("influence", {})]
    methods += [(method, {"seed": seed}) for method in DYNAMICS]
    rows = _salience_rows(name, seed, methods, train, test, flipped, peers)
    random = np.random.default_rng(seed).random(len(flipped))
    rows.append({"set": name, "seed": seed, "method": "random", "library": "", "fits": 0, "seconds": 0.0,
                 "peak_mb": None, **detection(random, flipped), "removal": removal_curves(random, train, test)})
    return rows


def _coded(labels, codes) -> np.ndarray:
    return np.array([codes[v] for v in labels])


def small_games(args) -> list[dict]:
    from sklearn.datasets import load_breast_cancer, load_wine

    from salience.data import DataBanzhaf, TmcShapley
    from salience.data.valuation import coalition_values, exact_values

    errors = {}
    for set_name, load in (("breast_cancer", load_breast_cancer), ("wine", load_wine)):
        X, y = load(return_X_y=True)
        X = _standardised(X)
        rng = np.random.default_rng(args.game_seed)
        for game in range(args.games):
            order = rng.permutation(len(y))
            while len(np.unique(y[order[:10]])) < 2:  # a single class cannot be valued: draw again
                order = rng.permutation(len(y))
            train, test = (X[order[:10]], y[order[:10]]), (X[order[10:110]], y[order[10:110]])
            arrays = {"g_X_train": train[0], "g_y_train": train[1], "g_X_test": test[0], "g_y_test": test[1]}
            coalitions = coalition_values(train, test)  # 1,024 fits, both kinds from them
            exact = {kind: exact_values(train, test, kind=kind, coalitions=coalitions).values
                     for kind in ("shapley", "banzhaf")}
            game_seed = 1000 * args.game_seed + game
            jobs = [{"game": "g", "library": "pydvl", "method": "tmc_shapley", "samples": args.game_perms,
                     "truncation": 0.01, "seed": game_seed},
                    {"game": "g", "library": "pydvl", "method": "data_banzhaf", "samples": args.game_perms * 10,
                     "seed": game_seed}]
            for peer in run_peers(jobs, arrays):
                kind = "shapley" if peer["method"] == "tmc_shapley" else "banzhaf"
                cls = TmcShapley if kind == "shapley" else DataBanzhaf
                ours = cls(budget=max(10, peer["fits"]), seed=game_seed).score(train, test).values
                for library, values in (("pydvl", np.array(peer["values"])), ("salience", ours)):
                    errors.setdefault((set_name, peer["method"], library), []).append(
                        (float(np.abs(values - exact[kind]).mean()), peer["fits"]))
    return [{"set": set_name, "method": method, "library": library, "games": len(v),
             "mean_abs_error": float(np.mean([e for e, _ in v])), "fits": float(np.mean([f for _, f in v]))}
            for (set_name, method, library), v in errors.items()]


def run(args) -> dict:
    result, seconds = {}, 0.0
    for name, stage in (("knn", knn_speed), ("detection", detection_rows), ("games", small_games),
                        ("tracin", tracin_rows)):
        result[name], spent = _stage(args, name, stage)
        seconds += spent
    result["detection"] = _by_game(result["detection"] + result.pop("tracin"))
    result["stage_seconds"] = seconds
    return result


def _stage(args, name: str, stage) -> tuple:
    """(a stage's result, the seconds it took), kept in ``--work`` keyed by the options, so a run
    that fails later (or is stopped) resumes after the stages it finished."""
    import hashlib

    key = json.dumps({k: v for k, v in sorted(vars(args).items()) if k not in ("write", "work")}, default=str)
    path = Path(args.work) / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    if path.exists():
        print(f"{name}: reusing {path}", file=sys.stderr, flush=True)
        saved = json.loads(path.read_text())
        return saved["result"], saved["seconds"]
    started = time.perf_counter()
    result = stage(args)
    seconds = time.perf_counter() - started
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"result": result, "seconds": seconds}))
    temporary.replace(path)
    return result, seconds


def _by_game(rows: list[dict]) -> list[dict]:
    """Rows ordered set by set, methods in the order they came (TracIn's stage after the rest)."""
    order = {name: i for i, name in enumerate(dict.fromkeys(r["set"] for r in rows))}
    return sorted(rows, key=lambda r: order[r["set"]])


def _grouped(rows: list[dict], keys: tuple) -> dict:
    groups: dict = {}
    for row in rows:
        groups.setdefault(tuple(row[k] for k in keys), []).append(row)
    return groups


def detection_table(rows: list[dict]) -> list[str]:
    seeds = sorted({r["seed"] for r in rows})
    lines = [f"| set | method | library | fits | seconds | AUC (mean ± sd over {len(seeds)} seeds) | precision@10% | "
             "largest difference from pyDVL |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for (set_name, method, library), group in _grouped(rows, ("set", "method", "library")).items():
        auc = np.array([r["auc"] for r in group])
        difference = max((r["max_difference"] for r in group if "max_difference" in r), default=None)
        lines.append(f"| {set_name} | {method} | {library} | {np.mean([r['fits'] for r in group]):.0f} | "
                     f"{np.mean([r['seconds'] for r in group]):.2f} | {auc.mean():.3f} ± {auc.std():.3f} | "
                     f"{np.mean([r['precision'] for r in group]):.3f} | "
                     f"{'' if difference is None else f'{difference:.1e}'} |")
    return lines


def comparison_table(rows: list[dict]) -> list[str]:
    """Per set, the mean AUC of each salience method against its peer (and of the best
    training-dynamics score and of influence against cleanlab)."""
    mean = {key: float(np.mean([r["auc"] for r in group]))
            for key, group in _grouped(rows, ("set", "method", "library")).items()}
    pairs = [("data_banzhaf", "data_banzhaf", "pydvl"), ("tmc_shapley", "tmc_shapley", "pydvl"),
             ("beta_shapley", "beta_shapley", "pydvl"), ("confident_learning", "confident_learning", "cleanlab")]
    pairs += [(method, "confident_learning", "cleanlab") for method in DYNAMICS + TRACIN + ("influence",)]
    sets = list(dict.fromkeys(r["set"] for r in rows))
    lines = ["| salience method | against | " + " | ".join(sets) + " | sets at or above |",
             "|---|---|" + "---:|" * (len(sets) + 1)]
    for ours, theirs, library in pairs:
        cells, wins = [], 0
        for set_name in sets:
            a, b = mean[(set_name, ours, "salience")], mean[(set_name, theirs, library)]
            wins += a >= b
            cells.append(f"{a:.3f} / {b:.3f}")
        lines.append(f"| {ours} | {library} {theirs} | " + " | ".join(cells) + f" | {wins} of {len(sets)} |")
    return lines


def removal_table(rows: list[dict]) -> list[str]:
    shown = (0, 2, 4)  # 10%, 30%, 50%
    head = " | ".join(f"-{int(100 * REMOVED[i])}% highest" for i in shown) + " | " + \
        " | ".join(f"-{int(100 * REMOVED[i])}% lowest" for i in shown)
    lines = [f"| method | library | {head} |", "|---|---|" + "---:|" * (2 * len(shown))]
    for (method, library), group in _grouped(rows, ("method", "library")).items():
        highest = np.mean([r["removal"]["highest"] for r in group], axis=0)
        lowest = np.mean([r["removal"]["lowest"] for r in group], axis=0)
        lines.append(f"| {method} | {library} | " + " | ".join(f"{highest[i]:.3f}" for i in shown) + " | " +
                     " | ".join(f"{lowest[i]:.3f}" for i in shown) + " |")
    return lines


def render(result: dict, command: str, seconds: float) -> str:
    knn = result["knn"]
    seeds = sorted({r["seed"] for r in result["detection"]})
    lines = ["## Data valuation: salience against pyDVL 0.10, cleanlab 2.9 and random", "",
             f"`{command}` ({result['stage_seconds'] / 60:.0f} minutes over its stages, 2 cores; peers in "
             ".venv-pydvl, timed inside their runner).", "",
             *knn_lines(knn), "",
             f"**Noisy-label detection** (10% of training labels flipped; seeds {', '.join(map(str, seeds))}, each its "
             "own split and flips; suspects first: the lowest values, the highest EL2N / GraNd / forgetting / TracIn "
             "self-influence; sampling "
             "methods at pyDVL's counted fits; the training-dynamics scores' fits are training runs):", ""]
    lines += detection_table(result["detection"])
    lines += ["", "Mean AUC, salience / peer, per set:", ""] + comparison_table(result["detection"])
    lines += ["", "**Point removal** (the same games; test accuracy of a logistic regression refitted without the "
              "highest or the lowest valued share; mean over sets and seeds; lower is better after removing the "
              "highest, higher after removing the lowest):", ""] + removal_table(result["detection"])
    lines += ["", "**Small games** (10 rows, 100 test rows; exact values from all 1,024 fits; equal fits per game; "
              "games drawn with a seed the estimators were not chosen on):", "",
              "| set | method | library | games | mean fits | mean absolute error to exact |", "|---|---|---|---:|---:|---:|"]
    for r in result["games"]:
        lines.append(f"| {r['set']} | {r['method']} | {r['library']} | {r['games']} | {r['fits']:.0f} | "
                     f"{r['mean_abs_error']:.4f} |")
    return "\n".join(lines) + "\n"


def knn_lines(knn: dict) -> list[str]:
    lines = [f"**KNN-Shapley, {knn['train']:,} training rows, {knn['test']:,} test rows** (DSIR pool, 64-dimensional "
             f"TF-IDF + SVD, k = 10; the pool as drawn holds {knn['repeated_rows']} repeated feature rows, dropped in "
             "the distinct run):", "",
             "| training rows | salience s | pyDVL s | speed-up | largest difference | peak RSS MB (whole run) |",
             "|---|---:|---:|---:|---:|---:|"]
    for name in ("drawn", "distinct"):
        r = knn[name]
        lines.append(f"| {name} | {r['seconds']:.2f} | {r['peer_seconds']:.2f} | "
                     f"{r['peer_seconds'] / r['seconds']:.1f}x | {r['max_difference']:.1e} | {r['peak_mb']:.0f} |")
    return lines


def render_label_errors(result: dict, command: str, seconds: float) -> str:
    dev_mean = {key: float(np.mean([r["auc"] for r in group]))
                for key, group in _grouped(result["dev"], ("set", "method")).items()}
    dev_sets_ = list(dict.fromkeys(r["set"] for r in result["dev"]))
    lines = ["## Label errors: confident learning with a neighbour vote, against cleanlab 2.9", "",
             f"`{command}` ({seconds / 60:.0f} minutes, 2 cores; cleanlab in .venv-pydvl, timed inside its runner). "
             "10% of training labels flipped, the games of the main valuation table (same seeds, same splits, "
             "same flips); 5 out-of-fold fits each; the vote fits nothing.", "",
             "**Choice on dev sets no table reports** (mean AUC over 5 seeds; rule: at or above plain self-confidence "
             "on every dev set, then the highest mean):", "",
             "| configuration | " + " | ".join(dev_sets_) + " | mean |", "|---|" + "---:|" * (len(dev_sets_) + 1)]
    for k in NEIGHBOR_CHOICES:
        label = _neighbors_label(k)
        cells = [dev_mean[(name, label)] for name in dev_sets_]
        lines.append(f"| {label}{' (chosen)' if k == NEIGHBORS else ''} | " + " | ".join(f"{c:.4f}" for c in cells)
                     + f" | {np.mean(cells):.4f} |")
    lines += ["", "**Judged on the reported sets** (seeds " + ", ".join(map(str, sorted({r['seed'] for r in
              result['test']}))) + "):", ""] + detection_table(result["test"])
    mean = {key: float(np.mean([r["auc"] for r in group]))
            for key, group in _grouped(result["test"], ("set", "method", "library")).items()}
    sets = list(dict.fromkeys(r["set"] for r in result["test"]))
    lines += ["", "| salience / cleanlab mean AUC | " + " | ".join(sets) + " | sets at or above |",
              "|---|" + "---:|" * (len(sets) + 1)]
    for k in (None, NEIGHBORS):
        label = _neighbors_label(k)
        pairs = [(mean[(name, label, "salience")], mean[(name, "confident_learning", "cleanlab")]) for name in sets]
        lines.append(f"| {label} | " + " | ".join(f"{a:.3f} / {b:.3f}" for a, b in pairs)
                     + f" | {sum(a >= b for a, b in pairs)} of {len(sets)} |")
    return "\n".join(lines) + "\n"


def render_knn(result: dict, command: str, seconds: float) -> str:
    return "\n".join(["## Data valuation: exact KNN-Shapley against pyDVL 0.10 at 10^4 rows", "",
                      f"`{command}` ({seconds:.0f} s, 2 cores; pyDVL in .venv-pydvl with scikit-learn 1.6, timed "
                      "inside its runner; salience with scikit-learn 1.9).", "", *knn_lines(result["knn"])]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n-train", type=int, default=200, help="training rows per noisy-label game")
    parser.add_argument("--n-test", type=int, default=300, help="test rows per noisy-label game")
    parser.add_argument("--budget", type=int, default=2000, help="fits of the sampling methods (about)")
    parser.add_argument("--knn-train", type=int, default=10_000)
    parser.add_argument("--games", type=int, default=20, help="small games for the agreement with exact values")
    parser.add_argument("--game-perms", type=int, default=10, help="TMC permutations per small game (Banzhaf: 10x)")
    parser.add_argument("--seed", type=int, default=0, help="the features' seed (SVD) and the KNN speed game's")
    parser.add_argument("--seeds", type=lambda t: [int(v) for v in t.split(",")], default=[0, 1, 2],
                        help="seeds of the noisy-label games (comma-separated)")
    parser.add_argument("--game-seed", type=int, default=1, help="seed of the small games")
    parser.add_argument("--work", default="/tmp/salience-valuation-bench",
                        help="finished stages are kept here; a rerun with the same options resumes after them")
    parser.add_argument("--knn-only", action="store_true",
                        help="only the KNN-Shapley comparison at --knn-train rows, in a section of its own")
    parser.add_argument("--label-errors", action="store_true",
                        help="only confident learning with and without its neighbour vote (size chosen on dev sets) "
                             "against cleanlab, in a section of its own")
    parser.add_argument("--walks-dev", action="store_true",
                        help="only the dev sets' choice between plain and antithetic permutation walks, in a "
                             "section of its own")
    given_argv = sys.argv[1:] if argv is None else argv
    if "--walks-dev" in given_argv:
        return run_benchmark("valuation.py", parser, walk_choice_rows, render_walk_choice, argv, variant="--walks-dev")
    if "--label-errors" in given_argv:
        return run_benchmark("valuation.py", parser, label_error_rows, render_label_errors, argv,
                             variant="--label-errors")
    if "--knn-only" in given_argv:
        return run_benchmark("valuation.py", parser, lambda args: {"knn": knn_speed(args)}, render_knn, argv,
                             variant="--knn-only")
    return run_benchmark("valuation.py", parser, run, render, argv)


if __name__ == "__main__":
    raise SystemExit(main())
