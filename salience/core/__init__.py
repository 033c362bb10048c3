"""The shared core: scores, runs, selectors and metrics that every domain uses."""

from salience.core.metrics import Report, evaluate, parse_metric
from salience.core.run import Qrels, Run
from salience.core.scores import Scores, rank_order
from salience.core.select import check_k, select_budget, select_threshold, select_top_k

__all__ = [
    "Scores",
    "rank_order",
    "Run",
    "Qrels",
    "evaluate",
    "parse_metric",
    "Report",
    "check_k",
    "select_top_k",
    "select_threshold",
    "select_budget",
]
