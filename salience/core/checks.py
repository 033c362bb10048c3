"""Argument checks every module shares (no other salience import, so nothing needs a lazy import)."""

from __future__ import annotations

import numbers
import os

from salience.exceptions import InvalidParameterError

__all__ = ["check_k", "check_n_jobs", "check_seed"]


def check_k(k: object, name: str = "k") -> int:
    """Validate a positive integer cut-off (or count) and return it as ``int``."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise InvalidParameterError(f"{name} must be a positive integer; got {k!r} ({type(k).__name__}).")
    if k <= 0:
        raise InvalidParameterError(f"{name} must be a positive integer; got {k}. Use {name} >= 1.")
    return int(k)


def check_n_jobs(n_jobs: object) -> int:
    """``n_jobs``: a positive number of parallel jobs, or -1 for one per core; returns the count."""
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, numbers.Integral) or n_jobs == 0 or n_jobs < -1:
        raise InvalidParameterError(f"n_jobs must be a positive integer or -1 (one per core); got {n_jobs!r}.")
    return (os.cpu_count() or 1) if n_jobs == -1 else int(n_jobs)


def check_seed(seed: object):
    """A random seed: None, a non-negative integer, or what numpy's ``default_rng`` takes
    (a SeedSequence or Generator); returned unchanged."""
    if isinstance(seed, bool) or (isinstance(seed, numbers.Integral) and seed < 0) or isinstance(seed, float):
        raise InvalidParameterError(f"seed must be a non-negative integer (or None); got {seed!r}.")
    return seed
