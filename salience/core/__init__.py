"""The shared core: scores, runs, selectors and metrics that every domain uses."""

from salience.core.aggregate import aggregate, bradley_terry, pagerank, pairwise_wins, win_rate
from salience.core.correlation import jaccard_at_k, kendall_tau, perfect_match_ratio, rank_biased_overlap, spearman_rho
from salience.core.fusion import FUSION_NORMS, fuse
from salience.core.judges import ListwiseJudge, PairwiseJudge, ScorerJudge
from salience.core.metrics import Report, evaluate, parse_metric
from salience.core.significance import Significance, paired_test
from salience.core.verify import SubjectsVerification, Verification, verify, verify_subjects
from salience.core.run import Qrels, Run
from salience.core.scores import Scores, rank_order
from salience.core.checks import check_k, check_n_jobs
from salience.core.select import (
    select_budget,
    select_coverage,
    select_cutoff,
    select_facility_location,
    select_fraction,
    select_mmr,
    select_threshold,
    select_top_k,
)
from salience.core.sort import (
    allpairs,
    bubble_top_k,
    heapsort_top_k,
    jointrank,
    permutation_self_consistency,
    setwise_top_k,
    sliding_window,
    tsp_order,
)

__all__ = [
    "FUSION_NORMS",
    "aggregate",
    "bradley_terry",
    "pagerank",
    "pairwise_wins",
    "win_rate",
    "fuse",
    "kendall_tau",
    "spearman_rho",
    "rank_biased_overlap",
    "jaccard_at_k",
    "perfect_match_ratio",
    "PairwiseJudge",
    "ListwiseJudge",
    "ScorerJudge",
    "allpairs",
    "heapsort_top_k",
    "bubble_top_k",
    "sliding_window",
    "setwise_top_k",
    "jointrank",
    "permutation_self_consistency",
    "tsp_order",
    "select_fraction",
    "select_mmr",
    "select_facility_location",
    "select_coverage",
    "select_cutoff",
    "Scores",
    "rank_order",
    "Run",
    "Qrels",
    "evaluate",
    "paired_test",
    "verify",
    "verify_subjects",
    "Verification",
    "SubjectsVerification",
    "Significance",
    "parse_metric",
    "Report",
    "check_k",
    "check_n_jobs",
    "select_top_k",
    "select_threshold",
    "select_budget",
]
