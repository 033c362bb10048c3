"""KernelSHAP (Lundberg and Lee, 2017): Shapley values as the solution of a weighted linear
regression over coalitions, with the efficiency constraint; coalitions dealt to designs shared
by groups of background rows and walked in Gray-code order (see :class:`KernelShap`)."""

from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np

from salience.core.params import Interval, Options
from salience.explain.attribution import Attribution, ModelCalls
from salience.explain.base import Explainer

__all__ = ["KernelShap"]


class KernelShap(Explainer):
    """KernelSHAP (Lundberg and Lee, 2017): Shapley values as the solution of a weighted linear
    regression over sampled coalitions, constrained to add up to ``f(x) - v(empty)``.

    The value function averages over the background rows, so the Shapley values are the mean
    of each background row's own game ``v_b(S) = f(x_S, b_{not S})``. The background rows are
    dealt to ``n_designs`` designs of ``n_samples`` coalitions each; each design's regression
    (constrained to ``f(x)`` minus its rows' mean ``f(b)``) is solved and the results averaged,
    weighted by rows. For the same model evaluations (``n_samples`` coalitions times the
    background rows, as shap's), the designs' sampling errors average out instead of being
    shared: several times more accurate than one design. In each design whole coalition
    sizes are enumerated, smallest and largest first, while the budget covers them (their
    kernel weights exact), as shap does; the rest of the budget is stratified by size and
    paired with complements, and the designs take different coalitions of each size (see
    ``_kernel_designs``). With a budget of 2^M - 2 or more every coalition is enumerated and
    the result is exact. ``n_samples`` default: 2 M + 2048. Every row explained in one call, or
    with the same seed, gets the same designs: a row's values do not depend on the others.

    ``n_designs``: ``"auto"`` (default) takes as many as it takes for the designs together to
    hold every coalition once, ``ceil((2^M - 2) / n_samples)``, at most one per background
    row; an integer sets it (one per background row is the most accurate, and slower on models
    that branch, below). Each design's coalitions are evaluated along a Gray-code walk, so that
    neighbours differ in few features, each coalition over the design's background rows in
    turn: the same sequence of background rows over and over, which tree ensembles' branch
    predictions learn (scikit-learn's gradient boosting at 256 coalitions: about 1.1x the model's
    own time on as many copies of one row). Rows are evaluated many explained rows
    per call, in blocks of at most ``_BLOCK_ELEMENTS`` values (chosen on a dev data set).
    """

    model_agnostic = True

    name = "kernel_shap"

    _parameter_constraints = {"n_designs": [Options(("auto",)), Interval("int", 1)]}

    def __init__(self, model: Callable, *, feature_names=None, n_designs: int | str = "auto"):
        self.n_designs = n_designs
        super().__init__(model, feature_names=feature_names)

    def attribute(self, inputs, *, baselines=None, target: int | None = None, n_samples: int | None = None,
                  batch_size: int | None = None, seed: int | None = 0) -> Attribution:
        x, background, names = self._checked(inputs, baselines, n_samples)
        calls = ModelCalls(self.model, target, batch_size)
        m, n_background = x.shape[1], len(background)
        budget = n_samples if n_samples is not None else 2 * m + 2048
        ends = np.concatenate([x, background])
        if m == 1:
            out = calls(ends)
            base = out[len(x):].mean()
            return Attribution((out[: len(x)] - base)[:, None], np.full(len(x), base), self.name, calls.calls, names,
                               {"batches": calls.batches})
        n_designs = (min(int(self.n_designs), n_background) if self.n_designs != "auto"
                     else max(1, min(n_background, -(-(2**m - 2) // budget))))
        masks, weights = _gray_walk(*_kernel_designs(m, budget, n_designs, np.random.default_rng(seed)))
        n = masks.shape[1]
        groups = [np.arange(d, n_background, n_designs) for d in range(n_designs)]  # background rows dealt out
        sums = np.zeros((len(x), n_designs, n))
        for block in _hybrid_blocks(n, m, [len(g) for g in groups]):
            # one explained row's hybrids of these pieces of designs: design by design, coalition
            # by coalition, the piece's background rows in turn. A hybrid is blended as
            # b (1 - keep) + x keep with keep in {0, 1}: the same values as np.where (finite
            # inputs), without its branch per value (3-4x faster on a random pattern)
            keep = np.concatenate([np.repeat(masks[d], hi - lo, axis=0) for d, lo, hi in block]).astype(float)
            background_part = np.concatenate([np.tile(background[groups[d][lo:hi]], (n, 1)) for d, lo, hi in block])
            background_part *= 1.0 - keep
            sizes = np.repeat([hi - lo for _, lo, hi in block], n)
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            designs = np.array([d for d, _, _ in block])
            per_call = max(1, _BLOCK_ELEMENTS // keep.size)
            for r in range(0, len(x), per_call):
                chunk = x[r : r + per_call]
                head = len(ends) if ends is not None else 0  # f(x) and f(b) go with the first call
                rows = np.empty((head + len(chunk) * len(keep), m))
                if head:
                    rows[:head] = ends
                hybrid = rows[head:].reshape(len(chunk), len(keep), m)
                np.multiply(chunk[:, None, :], keep[None], out=hybrid)
                hybrid += background_part[None]
                out = calls(rows)
                if head:
                    ends_out, out, ends = out[:head], out[head:], None
                pieces = np.add.reduceat(out.reshape(len(chunk), -1), starts, axis=1).reshape(len(chunk), len(block), n)
                np.add.at(sums, (slice(r, r + len(chunk)), designs), pieces)
        if ends is not None:  # a budget too small for any coalition: f(x) and f(b) alone
            ends_out = calls(ends)
        means = sums / np.array([len(g) for g in groups], dtype=float)[None, :, None]
        full, background_out = ends_out[: len(x)], ends_out[len(x) :]
        group_base = np.array([background_out[g].mean() for g in groups])
        totals = full[:, None] - group_base[None, :]
        project, project_last = _constrained_solvers(masks, weights)
        coef = np.einsum("dkn,idn->idk", project, means - group_base[None, :, None]) - project_last[None] * totals[..., None]
        phi = np.concatenate([coef, (totals - coef.sum(axis=2))[..., None]], axis=2)
        shares = np.array([len(g) for g in groups]) / n_background
        values = np.einsum("d,idk->ik", shares, phi)
        return Attribution(values, np.full(len(x), background_out.mean()), self.name, calls.calls, names,
                           {"batches": calls.batches, "designs": n_designs})


#: hybrid rows are built and evaluated this many values (rows x features) at a time, at most
#: (one design of one row always goes whole): 1 MB of float64. Larger calls spread a model's
#: fixed cost per call (scikit-learn's input checks) over more rows; smaller ones stay in cache
#: (scikit-learn's trees walk the whole batch once per tree; an MLP's activations). Chosen among
#: 2^17..2^21 on a dev data set the reported tables do not use (scikit-learn's diabetes
#: regression, gradient boosting and an MLP)
_BLOCK_ELEMENTS = 1 << 17


def _hybrid_blocks(n: int, m: int, group_sizes: list[int]) -> list[list[tuple[int, int, int]]]:
    """The hybrids of one explained row in blocks of at most ``_BLOCK_ELEMENTS`` values: each
    block a list of pieces ``(design, first, last)``, a design's coalitions over its background
    rows ``first:last``. A design too large for a block is split by background rows (down to
    one row, ``n m`` values, the least a piece holds)."""
    if n == 0:
        return []
    rows_per_piece = max(1, _BLOCK_ELEMENTS // (n * m))
    blocks, block, held = [], [], 0
    for d, size in enumerate(group_sizes):
        for lo in range(0, size, rows_per_piece):
            hi = min(size, lo + rows_per_piece)
            if block and held + (hi - lo) * n * m > _BLOCK_ELEMENTS:
                blocks.append(block)
                block, held = [], 0
            block.append((d, lo, hi))
            held += (hi - lo) * n * m
    return blocks + [block] if block else blocks


def _gray_walk(masks: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each design's coalitions reordered along the reflected Gray code (feature 0 the most
    significant bit; past 64 features the first 64 decide), so that consecutive coalitions
    differ in few features. A coalition's position in that code is the binary number of its
    prefix parities."""
    n_designs, n, _ = masks.shape
    if n < 2:
        return masks, weights
    packed = np.packbits(np.logical_xor.accumulate(masks[:, :, :64], axis=2), axis=2)
    keys = np.zeros((n_designs, n, 8), np.uint8)
    keys[:, :, : packed.shape[2]] = packed
    order = np.argsort(keys.view(">u8")[:, :, 0], axis=1, kind="stable")
    flat = (order + n * np.arange(n_designs)[:, None]).ravel()
    return masks.reshape(n_designs * n, -1)[flat].reshape(masks.shape), weights.reshape(-1)[flat].reshape(weights.shape)


def _constrained_solvers(masks: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each design d, the linear map from its coalition values y to the solution of
    argmin_phi sum w_d (y - Z_d phi)^2 subject to sum(phi) = total: the last coefficient is
    eliminated (phi_M = total - the others' sum), so the others are ``P_d (y - z_M total)`` =
    ``P_d y - (P_d z_M) total``, with ``P_d`` the weighted least-squares solution map: from the
    normal equations, all designs at once, or the pseudo-inverse (the minimum-norm solution, as
    lstsq's) for a design too small to determine them. Returns ``P`` shaped (designs, M - 1,
    coalitions) and ``P z_M`` shaped (designs, M - 1)."""
    last = masks[:, :, -1].astype(float)
    design = masks[:, :, :-1] - last[:, :, None]
    n_designs, n, m1 = design.shape
    weighted = np.swapaxes(design * weights[:, :, None], 1, 2)  # batched matrix products (BLAS)
    gram = weighted @ design
    determined = np.zeros(n_designs, dtype=bool)
    if n >= m1:
        try:  # the common case, every design determined: one Cholesky of the batch tells
            pivots = np.diagonal(np.linalg.cholesky(gram), axis1=1, axis2=2) ** 2
            determined = pivots.min(axis=1) > 1e-10 * pivots.max(axis=1)
        except np.linalg.LinAlgError:
            determined = np.linalg.cond(gram) < 1e10
    project = np.zeros((n_designs, m1, n))
    if determined.any():
        project[determined] = np.linalg.solve(gram[determined], weighted[determined])
    if n and not determined.all():
        root = np.sqrt(weights[~determined])
        project[~determined] = np.linalg.pinv(design[~determined] * root[:, :, None],
                                              rcond=np.finfo(float).eps * max(n, m1)) * root[:, None, :]
    return project, (project @ last[:, :, None])[:, :, 0]


def _kernel_plan(m: int, budget: int) -> tuple[list[int], dict[int, int], dict[int, float]]:
    """How a design of ``budget`` coalitions is spent: the size pairs enumerated whole, the
    draws of each other pair, and each pair's kernel mass. The kernel gives all coalitions of
    size s together the mass (m - 1) / (s (m - s)); sizes s and m - s are taken as a pair.
    Pairs are enumerated, smallest sizes first (as shap does), while the budget left, split by
    the mass left, affords each of their coalitions. The rest of the budget is stratified: each
    remaining pair gets a fixed number of draws (largest remainders), each drawn with its
    complement. Against shap's draws of sizes at random, this removes the variance of how many
    draws each size gets."""
    mass = np.array([(m - 1) / (s * (m - s)) for s in range(1, m)])  # by size 1..m-1
    pairs = list(range(1, m // 2 + 1))
    pair_mass = {s: mass[s - 1] + (mass[m - s - 1] if m - s != s else 0.0) for s in pairs}
    enumerated, sampled = [], []
    left_budget, left_mass = budget, sum(pair_mass.values())
    for s in pairs:
        count = math.comb(m, s) * (2 if m - s != s else 1)
        if not sampled and left_budget * pair_mass[s] / left_mass >= count - 1e-8:
            enumerated.append(s)
            left_budget -= count
            left_mass -= pair_mass[s]
        else:
            sampled.append(s)
    draws: dict[int, int] = {}
    n_draws = left_budget // 2
    if sampled and n_draws > 0:
        # draws in proportion to the square root of (pair mass x sizes in the pair): between
        # shap's kernel-proportional draws and the uniform draws over sizes of leverage-score
        # sampling (Musco and Witter, 2025); measured best of the three at 10 and 30 features
        weight = np.sqrt([pair_mass[s] * (2 if 2 * s != m else 1) for s in sampled])
        share = weight / weight.sum() * n_draws
        counts = np.floor(share).astype(int)
        counts[np.argsort(-(share - counts), kind="stable")[: n_draws - counts.sum()]] += 1
        for s, n_s in zip(sampled, counts.tolist()):
            n_s = min(n_s, math.comb(m, s) // (2 if 2 * s == m else 1))
            if n_s:
                draws[s] = n_s
    return enumerated, draws, pair_mass


#: a size's pairs are listed and dealt out to the designs when there are at most this
#: many (else each design draws its own at random: repeats are then rare)
_DEALT_PAIRS = 4096


def _kernel_designs(m: int, budget: int, n_designs: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n_designs`` designs of coalitions (neither empty nor full) with their regression
    weights, shaped ``(n_designs, n, m)`` and ``(n_designs, n)``. The enumerated sizes are the
    same in every design. A sampled size pair with few coalitions is dealt out: its pairs are
    shuffled once and each design takes the next ``draws`` of them, cyclically, so the designs
    cover the size evenly and none holds a pair twice; a size with many is drawn at random for
    each design. Every drawn coalition comes with its complement and carries its pair's mass
    shared by the draws."""
    enumerated, draws, pair_mass = _kernel_plan(m, budget)
    shared, shared_weights = [], []
    for s in enumerated:
        for size in sorted({s, m - s}):
            listed = _size_masks(m, size)
            shared.append(listed)
            shared_weights.append(np.full(len(listed), pair_mass[s] / (2 if 2 * s != m else 1) / len(listed)))
    parts = [np.broadcast_to(block, (n_designs, *block.shape)) for block in shared]
    weights = [np.broadcast_to(w, (n_designs, len(w))) for w in shared_weights]
    for s, n_s in draws.items():
        if math.comb(m, s) // (2 if 2 * s == m else 1) <= _DEALT_PAIRS:
            listed = _size_masks(m, s)
            if 2 * s == m:
                listed = listed[listed[:, 0]]  # a pair is named by whichever of the two holds feature 0
            order = rng.permutation(len(listed))
            taken = order[(np.arange(n_designs)[:, None] * n_s + np.arange(n_s)[None, :]) % len(listed)]
            chosen = listed[taken]
        else:
            keys = np.argsort(rng.random((n_designs * n_s, m)), axis=1)[:, :s]
            chosen = np.zeros((n_designs * n_s, m), dtype=bool)
            np.put_along_axis(chosen, keys, True, axis=1)
            chosen = chosen.reshape(n_designs, n_s, m)
        parts += [chosen, ~chosen]
        weights.append(np.full((n_designs, 2 * n_s), pair_mass[s] / (2 * n_s)))
    if not parts:
        return np.zeros((n_designs, 0, m), dtype=bool), np.zeros((n_designs, 0))
    return np.concatenate(parts, axis=1), np.concatenate(weights, axis=1)


@functools.lru_cache(maxsize=64)
def _size_masks(m: int, size: int) -> np.ndarray:
    """Every coalition of ``size`` of ``m`` features (read-only; listed once per process)."""
    listed = np.array(list(_combinations(m, size)), dtype=bool).reshape(-1, m)
    listed.flags.writeable = False
    return listed


def _combinations(m: int, size: int):
    from itertools import combinations

    for chosen in combinations(range(m), size):
        mask = np.zeros(m, dtype=bool)
        mask[list(chosen)] = True
        yield mask
