"""Model-agnostic attribution by coalitions of features: exact Shapley values, KernelSHAP,
permutation Shapley, Banzhaf values and occlusion.

Every method explains ``f(x)`` against background rows ``B`` (``baselines``): a coalition S of
features keeps ``x`` on S and takes the background's values elsewhere, and its value is the
mean model output over the background rows (the interventional value function of
Lundberg and Lee, 2017; Janzing et al., 2020)::

    v(S) = mean_b f(x_S, b_{not S})

The Shapley value of feature i is the average of its marginal contributions
``v(S + i) - v(S)`` over coalitions, weighted by ``|S|! (M - |S| - 1)! / M!``; they add up to
``f(x) - v(empty)`` (efficiency). Banzhaf weights every coalition alike. The model is called
on batches of hybrid rows, never one row at a time.
"""

from __future__ import annotations

import abc
import functools
import math
from typing import Callable

import numpy as np

from salience.core.checks import check_k
from salience.core.base import Scorer, register
from salience.exceptions import InvalidParameterError
from salience.explain.attribution import Attribution, ModelCalls, check_baselines, check_inputs, feature_names_of

__all__ = ["Explainer", "CoalitionExplainer", "ExactShapley", "Banzhaf", "KernelShap", "PermutationShapley", "Occlusion", "Lime",
           "ShapleyInteraction", "coalition_values"]

#: exact enumeration is refused past this many features (2^M coalitions)
MAX_EXACT_FEATURES = 16


def coalition_values(calls: ModelCalls, x: np.ndarray, background: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """v(S) for each coalition (row of boolean ``masks``): the mean output over the background
    rows of ``x`` on S and the background elsewhere. One batched model call sequence."""
    hybrid = np.where(masks[:, None, :], x[None, None, :], background[None, :, :])
    outputs = calls(hybrid.reshape(-1, len(x)))
    return outputs.reshape(len(masks), len(background)).mean(axis=1)


class Explainer(Scorer, abc.ABC):
    """Base of the attribution methods: ``Method(model, **options).attribute(inputs, *,
    baselines=None, target=None, n_samples=None, batch_size=None, seed=0)`` returns an
    :class:`~salience.explain.Attribution` for every row of ``inputs``.

    ``model``: any callable from a 2-D array of rows to one output per row (or to ``(rows,
    outputs)``, with ``target`` naming the column). ``baselines``: background rows that stand
    for an absent feature (default: zeros). ``n_samples``: the coalitions evaluated per row,
    for the sampling methods. ``batch_size``: rows per model call (default: all of a row's
    coalitions at once)."""

    name = ""
    #: whether the method needs nothing of the model but its outputs on inputs with features
    #: removed (coalitions): such a method explains any black box, a text or a prompt
    model_agnostic = False

    def __init__(self, model: Callable, *, feature_names=None):
        self.model = model
        self.feature_names = feature_names

    @abc.abstractmethod
    def attribute(self, inputs, *, baselines=None, target: int | None = None, n_samples: int | None = None,
                  batch_size: int | None = None, seed: int | None = 0) -> Attribution:
        """Attributions of every row of ``inputs`` (see the class docstring)."""

    def _checked(self, inputs, baselines, n_samples):
        """(rows, background rows, feature names) of a call, each validated."""
        x = check_inputs(inputs)
        background = check_baselines(baselines, x.shape[1])
        names = feature_names_of(self.feature_names, x.shape[1])
        if n_samples is not None:
            n_samples = check_k(n_samples, "n_samples")
        return x, background, names

    def score(self, inputs, **options):
        """The attribution of one row as :class:`~salience.Scores` over its features."""
        x = check_inputs(inputs)
        if len(x) != 1:
            raise InvalidParameterError(f"score explains one row; got {len(x)}: use score_batch or attribute.")
        return self.attribute(x, **options).to_scores()

    def score_batch(self, inputs, **options) -> list:
        """The attribution of each row as :class:`~salience.Scores`."""
        attribution = self.attribute(inputs, **options)
        return [attribution.to_scores(r) for r in range(len(attribution))]


class CoalitionExplainer(Explainer):
    """The methods that evaluate coalitions of features (:func:`coalition_values`), row by row."""

    def attribute(self, inputs, *, baselines=None, target: int | None = None, n_samples: int | None = None,
                  batch_size: int | None = None, seed: int | None = 0) -> Attribution:
        x, background, names = self._checked(inputs, baselines, n_samples)
        calls = ModelCalls(self.model, target, batch_size)
        # each row draws from its own generator seeded alike: a row's attribution does not
        # depend on the rows explained with it
        explained = [self._explain_row(calls, row, background, n_samples, np.random.default_rng(seed)) for row in x]
        values = np.array([phi for phi, _ in explained], dtype=np.float64)
        base = np.array([b for _, b in explained], dtype=np.float64)
        return Attribution(values, base, self.name, calls.calls, names, {"batches": calls.batches})

    @abc.abstractmethod
    def _explain_row(self, calls, x, background, n_samples, rng) -> tuple[np.ndarray, float]:
        """(attributions, base value) of one row."""


def _all_masks(m: int) -> np.ndarray:
    """Every coalition of ``m`` features, as rows of a boolean matrix (row s has bit i of s)."""
    return ((np.arange(2**m)[:, None] >> np.arange(m)[None, :]) & 1).astype(bool)


def _check_exact(m: int, method: str) -> None:
    if m > MAX_EXACT_FEATURES:
        raise InvalidParameterError(f"{method} enumerates 2^{m} coalitions for {m} features; it is limited to "
                                    f"{MAX_EXACT_FEATURES} features: use KernelShap or PermutationShapley (sampling).")


class ExactShapley(CoalitionExplainer):
    """Shapley values by enumerating all 2^M coalitions (M <= 16): exact, and the reference the
    sampling methods are measured against.

    >>> f = lambda X: 2 * X[:, 0] + X[:, 0] * X[:, 1]
    >>> a = ExactShapley(f).attribute([[1.0, 1.0]])
    >>> a.values.tolist(), a.base_value.tolist()
    ([[2.5, 0.5]], [0.0])
    """

    model_agnostic = True

    name = "exact_shapley"

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        _check_exact(m, "ExactShapley")
        v = coalition_values(calls, x, background, _all_masks(m))
        return _shapley_from_values(v, m), v[0]


def _shapley_from_values(v: np.ndarray, m: int) -> np.ndarray:
    """Shapley values from v over every coalition (v[s] for the coalition with bits s)."""
    sizes = np.array([bin(s).count("1") for s in range(2**m)])
    weight = np.array([math.factorial(s) * math.factorial(m - s - 1) / math.factorial(m) for s in range(m)])
    phi = np.zeros(m)
    subsets = np.arange(2**m)
    for i in range(m):
        without = subsets[(subsets >> i) & 1 == 0]
        phi[i] = np.sum(weight[sizes[without]] * (v[without | (1 << i)] - v[without]))
    return phi


class ShapleyInteraction(CoalitionExplainer):
    """Pairwise Shapley interaction values by enumerating every coalition (M <= 16): for each
    row an M x M matrix. Off the diagonal, half the Shapley interaction index (Grabisch and
    Roubens, 1999) of i and j,

        I_ij = sum over S without i, j of |S|! (M - |S| - 2)! / (M - 1)! x
               [v(S + i + j) - v(S + i) - v(S + j) + v(S)],

    and on the diagonal the main effect, the Shapley value less the row's interactions: each
    row adds up to the feature's Shapley value and the matrix to ``f(x) - v(empty)`` (the SHAP
    interaction values of Lundberg et al., 2020). ``to_scores`` ranks the pairs i < j by
    their interaction.

    >>> f = lambda X: X[:, 0] * X[:, 1] + X[:, 2]
    >>> ShapleyInteraction(f).attribute([[1.0, 2.0, 3.0]]).values[0].tolist()
    [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 3.0]]
    """

    name = "shapley_interaction"

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        _check_exact(m, "ShapleyInteraction")
        v = coalition_values(calls, x, background, _all_masks(m))
        subsets = np.arange(2**m)
        sizes = np.array([bin(s).count("1") for s in subsets])
        phi = np.zeros((m, m))
        if m == 1:
            return np.array([[v[1] - v[0]]]), v[0]
        weight = np.array([math.factorial(s) * math.factorial(m - s - 2) / math.factorial(m - 1) for s in range(m - 1)])
        for i in range(m):
            for j in range(i + 1, m):
                without = subsets[((subsets >> i) & 1 == 0) & ((subsets >> j) & 1 == 0)]
                delta = v[without | (1 << i) | (1 << j)] - v[without | (1 << i)] - v[without | (1 << j)] + v[without]
                phi[i, j] = phi[j, i] = np.sum(weight[sizes[without]] * delta) / 2
        shapley = _shapley_from_values(v, m)
        phi[np.diag_indices(m)] = shapley - (phi.sum(axis=1) - np.diag(phi))
        return phi, v[0]


class Banzhaf(CoalitionExplainer):
    """Banzhaf values: marginal contributions averaged over all coalitions alike (exact, M <= 16)."""

    model_agnostic = True

    name = "banzhaf"

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        _check_exact(m, "Banzhaf")
        v = coalition_values(calls, x, background, _all_masks(m))
        subsets = np.arange(2**m)
        phi = np.array([np.mean(v[subsets[(subsets >> i) & 1 == 0] | (1 << i)] - v[subsets[(subsets >> i) & 1 == 0]])
                        for i in range(m)])
        return phi, v[0]


class KernelShap(Explainer):
    """KernelSHAP (Lundberg and Lee, 2017): Shapley values as the solution of a weighted linear
    regression over sampled coalitions, constrained to add up to ``f(x) - v(empty)``.

    The value function averages over the background rows, so the Shapley values are the mean
    of each background row's own game ``v_b(S) = f(x_S, b_{not S})``. The background rows are
    dealt to ``n_designs`` designs of ``n_samples`` coalitions each; each design's regression
    (constrained to ``f(x)`` minus its rows' mean ``f(b)``) is solved and the results averaged,
    weighted by rows. For the same model evaluations (``n_samples`` coalitions times the
    background rows, as shap's), the designs' sampling errors average out instead of being
    shared: about 3x more accurate than one design (BENCHMARKS.md). In each design whole coalition
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
    own time on as many copies of one row, BENCHMARKS.md). Rows are evaluated many explained rows
    per call, in blocks of at most ``_BLOCK_ELEMENTS`` values (chosen on a dev data set).
    """

    model_agnostic = True

    name = "kernel_shap"

    def __init__(self, model: Callable, *, feature_names=None, n_designs: int | str = "auto"):
        super().__init__(model, feature_names=feature_names)
        if n_designs != "auto" and (not isinstance(n_designs, (int, np.integer)) or isinstance(n_designs, bool)
                                    or n_designs < 1):
            raise InvalidParameterError(f"n_designs must be 'auto' or a positive integer; got {n_designs!r}.")
        self.n_designs = n_designs

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
#: regression, gradient boosting and an MLP: bench/explain.py --parts choose, BENCHMARKS.md)
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


class PermutationShapley(CoalitionExplainer):
    """Shapley values sampled over random feature orders, each order walked forward and then
    backward (antithetic sampling, as shap's Permutation explainer): every walk adds features
    one at a time, and each addition's change of v is that feature's contribution. Exact in
    expectation; efficiency holds for every sample. ``n_samples``: coalitions evaluated per
    row (2 M of them per pair of walks; default 10 pairs)."""

    model_agnostic = True

    name = "permutation_shapley"

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        pairs = max(1, (n_samples if n_samples is not None else 20 * m) // (2 * m))
        orders = []
        for _ in range(pairs):
            order = rng.permutation(m)
            orders += [order, order[::-1]]
        # the coalitions along every walk: the first k features of the order, k = 0..m
        masks = np.zeros((len(orders), m + 1, m), dtype=bool)
        for w, order in enumerate(orders):
            for k in range(1, m + 1):
                masks[w, k] = masks[w, k - 1]
                masks[w, k, order[k - 1]] = True
        # the empty and full coalitions are the same for every walk: evaluate them once
        ends = coalition_values(calls, x, background, np.array([np.zeros(m, bool), np.ones(m, bool)]))
        inner = coalition_values(calls, x, background, masks[:, 1:m].reshape(-1, m)).reshape(len(orders), m - 1)
        v = np.concatenate([np.full((len(orders), 1), ends[0]), inner, np.full((len(orders), 1), ends[1])], axis=1)
        phi = np.zeros(m)
        for w, order in enumerate(orders):
            phi[order] += np.diff(v[w])
        return phi / len(orders), ends[0]


class Occlusion(CoalitionExplainer):
    """Occlusion (feature ablation): each feature, or each group of ``feature_groups`` (a list
    of lists of feature indexes), replaced by the background; its attribution is the drop of
    the output, ``f(x) - v(all but it)``. Not additive: the values need not add up."""

    model_agnostic = True

    name = "occlusion"

    def __init__(self, model: Callable, *, feature_names=None, feature_groups=None):
        super().__init__(model, feature_names=feature_names)
        self.feature_groups = feature_groups

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        groups = self.feature_groups if self.feature_groups is not None else [[i] for i in range(m)]
        seen = [i for g in groups for i in g]
        if any(not isinstance(i, (int, np.integer)) or not 0 <= i < m for i in seen) or len(set(seen)) != len(seen):
            raise InvalidParameterError(f"feature_groups must be disjoint lists of feature indexes in [0, {m}).")
        masks = np.ones((len(groups) + 2, m), dtype=bool)
        masks[0] = False  # v(empty), the base value
        for g, members in enumerate(groups):
            masks[g + 2, list(members)] = False
        v = coalition_values(calls, x, background, masks)
        phi = np.zeros(m)
        for g, members in enumerate(groups):
            phi[list(members)] = (v[1] - v[g + 2]) / len(members)  # a group's drop, shared by its members
        return phi, v[0]


class Lime(CoalitionExplainer):
    """LIME (Ribeiro et al., 2016) over coalitions: random coalitions (each feature kept with
    probability 1/2), weighted by an exponential kernel of their cosine distance to the whole
    input (width ``kernel_width`` x 100, as lime's text explainer), fitted by a weighted
    ridge regression with an intercept; ``n_features`` keeps the surrogate sparse: the
    features with the largest coefficients, refitted alone (lime's "highest weights").
    ``n_samples`` default: 1000 (lime's default 5000 is for larger inputs)."""

    model_agnostic = True

    name = "lime"

    def __init__(self, model: Callable, *, feature_names=None, n_features: int | None = None, kernel_width: float = 0.25,
                 alpha: float = 1.0):
        super().__init__(model, feature_names=feature_names)
        if n_features is not None:
            n_features = check_k(n_features, "n_features")
        if not kernel_width > 0 or not alpha >= 0:
            raise InvalidParameterError(f"kernel_width must be > 0 and alpha >= 0; got {kernel_width!r} and {alpha!r}.")
        self.n_features, self.kernel_width, self.alpha = n_features, kernel_width, alpha

    def _explain_row(self, calls, x, background, n_samples, rng):
        m = len(x)
        n = n_samples if n_samples is not None else 1000
        masks = rng.random((n, m)) < 0.5
        masks[0] = True  # the input itself, as lime includes it
        v = coalition_values(calls, x, background, masks)
        kept = masks.sum(axis=1)
        distance = 1.0 - np.sqrt(kept / m)  # cosine distance of a 0/1 coalition to all ones
        weight = np.exp(-((distance * 100) ** 2) / (self.kernel_width * 100) ** 2)
        chosen = np.arange(m)
        coef, intercept = _ridge(masks.astype(float), v, weight, self.alpha)
        if self.n_features is not None and self.n_features < m:
            chosen = np.sort(np.argsort(-np.abs(coef), kind="stable")[: self.n_features])
            coef_chosen, intercept = _ridge(masks[:, chosen].astype(float), v, weight, self.alpha)
            coef = np.zeros(m)
            coef[chosen] = coef_chosen
        return coef, intercept


def _ridge(Z: np.ndarray, y: np.ndarray, w: np.ndarray, alpha: float) -> tuple[np.ndarray, float]:
    """Weighted ridge regression with an unpenalised intercept: (coefficients, intercept)."""
    mean_z = np.average(Z, axis=0, weights=w)
    mean_y = np.average(y, weights=w)
    Zc, yc = Z - mean_z, y - mean_y
    gram = (Zc * w[:, None]).T @ Zc + alpha * np.eye(Z.shape[1])
    coef = np.linalg.solve(gram, (Zc * w[:, None]).T @ yc)
    return coef, float(mean_y - mean_z @ coef)


_DESCRIPTIONS = {
    "exact_shapley": (ExactShapley, "Shapley values by enumerating every coalition (up to 16 features)"),
    "kernel_shap": (KernelShap, "KernelSHAP: efficiency-constrained weighted regression over coalitions (Lundberg and Lee, 2017)"),
    "permutation_shapley": (PermutationShapley, "Shapley values sampled over feature orders, antithetic (Strumbelj and Kononenko, 2014)"),
    "shapley_interaction": (ShapleyInteraction, "pairwise Shapley interaction values, exact (Grabisch and Roubens, 1999; "
                                                "Lundberg et al., 2020)"),
    "banzhaf": (Banzhaf, "Banzhaf values: marginal contributions over all coalitions alike (exact)"),
    "occlusion": (Occlusion, "occlusion / feature ablation: the output's drop when a feature or group is removed"),
    "lime": (Lime, "LIME: a weighted, optionally sparse, linear surrogate over random coalitions (Ribeiro et al., 2016)"),
}
for _name, (_cls, _description) in _DESCRIPTIONS.items():
    register("explain", _name, _cls, _description)


def model_agnostic_methods() -> tuple[str, ...]:
    """The registered ``explain`` methods that explain any black box from its outputs on
    coalitions (texts, prompts, search results use these)."""
    from salience.core.base import registered

    return tuple(m.name for m in registered("explain") if getattr(m.factory, "model_agnostic", False))
