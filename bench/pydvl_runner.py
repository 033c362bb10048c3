"""The peers of bench/valuation.py, run in their own environment (pyDVL 0.10 needs numpy < 2;
``make .venv-pydvl/bin/python`` builds it with cleanlab 2.9): reads a list of jobs (JSON) and the games'
arrays (npz), runs each job, writes values, seconds and model fits (JSON).

    .venv-pydvl/bin/python bench/pydvl_runner.py JOBS.json OUT.json

A job: {"game": NAME, "library": "pydvl"|"cleanlab", "method": ..., "samples": N, "seed": S,
"model": "logistic"|"knn", ...}, or {"game", "library": "pydvl-removal", "model", "values": [...],
"percentages": [...]} for pyDVL's point-removal experiment (its scores come back as "values"); NAME_X_train, NAME_y_train, NAME_X_test, NAME_y_test in the npz.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier

FITS = [0]


class CountedLogistic(LogisticRegression):
    """scikit-learn's logistic regression, counting its fits (pyDVL clones it per coalition)."""

    def fit(self, X, y, sample_weight=None):
        FITS[0] += 1
        return super().fit(X, y, sample_weight=sample_weight)


def _model(job):
    if job.get("model", "logistic") == "knn":
        return KNeighborsClassifier(n_neighbors=job.get("k", 10))
    return CountedLogistic(max_iter=1000)


def run_pydvl(job, train, test):
    from pydvl.valuation import Dataset, ModelUtility, SupervisedScorer
    from pydvl.valuation.methods import (BetaShapleyValuation, KNNShapleyValuation, LOOValuation,
                                         MSRBanzhafValuation, ShapleyValuation)
    from pydvl.valuation.samplers import PermutationSampler
    from pydvl.valuation.samplers.truncation import NoTruncation, RelativeTruncation
    from pydvl.valuation.stopping import MaxSamples, NoStopping

    data_train, data_test = Dataset(*train), Dataset(*test)
    method = job["method"]
    if method == "knn_shapley":
        valuation = KNNShapleyValuation(_model(job), test_data=data_test, progress=False)
        valuation.fit(data_train)
        return valuation.result.values
    scorer = SupervisedScorer("accuracy", data_test, default=0.0, range=(0.0, 1.0))
    utility = ModelUtility(_model(job), scorer, catch_errors=True, show_warnings=False)
    seed = job.get("seed", 0)
    if method == "loo":
        valuation = LOOValuation(utility, progress=False)
    elif method == "data_banzhaf":
        valuation = MSRBanzhafValuation(utility, is_done=NoStopping(), seed=seed, progress=False)
        valuation.is_done = MaxSamples(valuation.sampler, job["samples"])  # it makes its own sampler
    elif method in ("tmc_shapley", "beta_shapley"):
        truncation = RelativeTruncation(rtol=job["truncation"]) if job.get("truncation") else NoTruncation()
        sampler = PermutationSampler(truncation=truncation, seed=seed)
        if method == "tmc_shapley":  # TMCShapleyValuation with this sampler, which the criterion counts
            valuation = ShapleyValuation(utility, sampler=sampler, is_done=MaxSamples(sampler, job["samples"]),
                                         progress=False)
        else:
            valuation = BetaShapleyValuation(utility, sampler=sampler, is_done=MaxSamples(sampler, job["samples"]),
                                             alpha=job.get("alpha", 16.0), beta=job.get("beta", 1.0), progress=False)
    else:
        raise ValueError(f"unknown pydvl method {method}")
    valuation.fit(data_train)
    return valuation.result.values


def run_removal(job, train, test):
    """pyDVL's point-removal experiment (``compute_removal_score``, best first) for the job's
    values at its percentages: the model refitted on what is left, scored (accuracy) on test."""
    from pydvl.reporting.scores import compute_removal_score
    from pydvl.valuation import Dataset, ModelUtility, SupervisedScorer
    from pydvl.valuation.result import ValuationResult

    data_train, data_test = Dataset(*train), Dataset(*test)
    scorer = SupervisedScorer("accuracy", data_test, default=0.0, range=(0.0, 1.0))
    utility = ModelUtility(_model(job), scorer, catch_errors=False, show_warnings=False)
    values = np.asarray(job["values"], dtype=float)
    result = ValuationResult(values=values, indices=np.arange(len(values)))
    scores = compute_removal_score(utility, result, data_train, job["percentages"], remove_best=True)
    return [scores[p] for p in job["percentages"]]


def run_cleanlab(job, train, test):
    from cleanlab.filter import find_label_issues
    from cleanlab.rank import get_label_quality_scores
    from sklearn.model_selection import cross_val_predict

    X, y = train
    probabilities = cross_val_predict(_model(job), X, y, cv=job.get("folds", 5), method="predict_proba")
    scores = get_label_quality_scores(y, probabilities)
    issues = find_label_issues(y, probabilities)
    return scores, issues


def main(jobs_path: str, out_path: str) -> int:
    spec = json.load(open(jobs_path))
    arrays = np.load(spec["arrays"], allow_pickle=False)
    results = []
    for job in spec["jobs"]:
        game = job["game"]
        train = (arrays[f"{game}_X_train"], arrays[f"{game}_y_train"])
        test = (arrays[f"{game}_X_test"], arrays[f"{game}_y_test"])
        FITS[0] = 0
        start = time.perf_counter()
        issues = None
        if job["library"] == "pydvl-removal":
            values = run_removal(job, train, test)
        elif job["library"] == "pydvl":
            values = run_pydvl(job, train, test)
        else:
            values, issues = run_cleanlab(job, train, test)
        seconds = time.perf_counter() - start
        results.append({**job, "values": np.asarray(values, dtype=float).tolist(), "seconds": seconds,
                        "fits": FITS[0] if job.get("model", "logistic") != "knn" else 0,
                        "issues": None if issues is None else np.asarray(issues, dtype=bool).tolist()})
        print(f"{job['library']} {job['method']} {game}: {seconds:.2f} s, {FITS[0]} fits", file=sys.stderr, flush=True)
    json.dump(results, open(out_path, "w"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
