"""Mixed precision chosen by importance: which layers of a decoder lose most when rounded to
few bits, and bits allotted under an average-bit budget.

The ``precision`` family scores each quantizable layer (:class:`~salience.Scores` over layer
names, higher: keep it wider) by what rounding it to ``low_bits`` costs over rounding it to
``high_bits`` (round to nearest on the scheme's grid, so the scores are cheap and independent
of the quantizer used afterwards):

* ``output_error``: the increase of the layer's squared output error over the calibration
  tokens, ``tr(dW H dW^T)`` with ``H = X^T X`` of its inputs (the quantity GPTQ minimises);
* ``fisher``: the second-order estimate of the calibration loss increase,
  ``1/2 sum_ij F_ij dW_ij^2`` with ``F`` the empirical Fisher diagonal (squared gradients of
  the loss, batch by batch), as HAWQ-V2 and SqueezeLLM weigh rounding errors;
* ``magnitude``: ``||dW||^2`` alone (no calibration; a baseline).

:func:`allot_bits` turns the scores into bits per layer with the core's knapsack
(:func:`~salience.core.select.select_budget`): each layer's upgrade from ``low_bits`` to
``high_bits`` costs its extra bits, and the upgrades with the most score are bought until the
average reaches the budget. Bits are counted per weight; the scales (the same at one group
size) are left out of the average.
"""

from __future__ import annotations

import abc
import math
from functools import reduce

import numpy as np

from salience.compress.quant_grid import QuantScheme, quantize_rtn
from salience.compress.weights import check_calibration, collect_statistics, prunable_linears
from salience.core.base import Scorer, method_of, register_method
from salience.core.params import Interval
from salience.core.scores import Scores
from salience.core.select import select_budget
from salience.exceptions import InvalidParameterError
from salience.extras import require_torch

__all__ = ["PrecisionCriterion", "OutputError", "Fisher", "Magnitude", "precision_criterion", "allot_bits",
           "check_bit_budget"]


class PrecisionCriterion(Scorer, abc.ABC):
    """Base of the ``precision`` family (see the module docstring): ``score(model,
    calibration)`` gives one score per quantizable layer, its ids the layers' names."""

    needs_calibration = True
    _parameter_constraints = {"low_bits": [Interval("int", 2, 8)], "high_bits": [Interval("int", 2, 8)],
                              "group_size": [None, Interval("int", 2)], "batch_size": [Interval("int", 1)]}

    def __init__(self, *, low_bits: int = 4, high_bits: int = 8, group_size: int | None = 128,
                 batch_size: int = 4):
        self.low_bits, self.high_bits, self.group_size, self.batch_size = low_bits, high_bits, group_size, batch_size
        self._validate_params()
        if high_bits <= low_bits:
            raise InvalidParameterError(f"high_bits ({high_bits}) must exceed low_bits ({low_bits}).")

    def _deltas(self, weight):
        """(dW at low bits, dW at high bits) of one matrix, float64."""
        torch = require_torch("Mixed precision")
        w = weight.detach().to(torch.float32)
        group = self.group_size if self.group_size is not None and w.shape[1] >= self.group_size else None
        low = quantize_rtn(w, QuantScheme(self.low_bits, group)).dequantize(torch.float64) - w.double()
        high = quantize_rtn(w, QuantScheme(self.high_bits, group)).dequantize(torch.float64) - w.double()
        return low, high

    @abc.abstractmethod
    def score(self, model, calibration=None) -> Scores:
        """The subclass's part."""

    def score_batch(self, batch) -> list[Scores]:
        return [self.score(model, calibration) for model, calibration in batch]


@register_method("precision", "output_error", "increase of a layer's squared output error on calibration inputs, "
                                              "tr(dW H dW^T), from high to low bits")
class OutputError(PrecisionCriterion):
    def score(self, model, calibration=None) -> Scores:
        layers = prunable_linears(model)
        stats = collect_statistics(model, layers, check_calibration(calibration), batch_size=self.batch_size,
                                   hessian=True, gradients=False)
        values = []
        for name, module in layers:
            low, high = self._deltas(module.weight)
            h = stats[name].hessian / max(stats[name].tokens, 1)
            values.append(float(((low @ h) * low).sum() - ((high @ h) * high).sum()))
        return Scores(np.asarray(values), ids=[name for name, _ in layers])


@register_method("precision", "fisher", "second-order loss increase 1/2 sum F dW^2 with the empirical Fisher "
                                        "diagonal of the calibration loss (HAWQ-V2, SqueezeLLM)")
class Fisher(PrecisionCriterion):
    def score(self, model, calibration=None) -> Scores:
        torch = require_torch("Mixed precision")
        layers = prunable_linears(model)
        windows = torch.as_tensor(check_calibration(calibration))
        fisher = {name: torch.zeros_like(module.weight, dtype=torch.float64) for name, module in layers}
        flags = [(p, p.requires_grad) for p in model.parameters()]
        try:
            for p in model.parameters():
                p.requires_grad_(False)
            for _, module in layers:
                module.weight.requires_grad_(True)
            for lo in range(0, len(windows), self.batch_size):
                chunk = windows[lo : lo + self.batch_size]
                model.zero_grad(set_to_none=True)
                model(input_ids=chunk, labels=chunk, use_cache=False).loss.backward()
                for name, module in layers:
                    g = module.weight.grad.double()
                    fisher[name] += g * g
        finally:
            model.zero_grad(set_to_none=True)
            for p, flag in flags:
                p.requires_grad_(flag)
        values = []
        for name, module in layers:
            low, high = self._deltas(module.weight)
            values.append(0.5 * float((fisher[name] * (low * low - high * high)).sum()))
        return Scores(np.asarray(values), ids=[name for name, _ in layers])


@register_method("precision", "magnitude", "||dW||^2 from high to low bits (no calibration; a baseline)")
class Magnitude(PrecisionCriterion):
    needs_calibration = False

    def score(self, model, calibration=None) -> Scores:
        layers = prunable_linears(model)
        values = []
        for _, module in layers:
            low, high = self._deltas(module.weight)
            values.append(float((low * low).sum() - (high * high).sum()))
        return Scores(np.asarray(values), ids=[name for name, _ in layers])


def precision_criterion(method: str | PrecisionCriterion, **params) -> PrecisionCriterion:
    """A registered ``precision`` criterion by name, built with ``params``, or one as it is."""
    return method_of("precision", method, PrecisionCriterion, **params)


def check_bit_budget(budget: float, low_bits: int, high_bits: int) -> float:
    """The average-bit budget, or an error when no allotment of ``low_bits`` and ``high_bits``
    can meet it."""
    if not isinstance(budget, (int, float)) or not math.isfinite(budget):
        raise InvalidParameterError(f"the bit budget must be a finite number; got {budget!r}.")
    if budget < low_bits:
        raise InvalidParameterError(f"a bit budget of {budget} is below the smallest scheme ({low_bits} bits a "
                                    "weight): every layer needs at least that.")
    return float(min(budget, high_bits))


def allot_bits(scores: Scores, sizes, *, budget: float, low_bits: int = 4, high_bits: int = 8) -> dict[str, int]:
    """Bits per layer (ids of ``scores``) whose weighted average is at most ``budget``: the
    layers whose upgrade buys the most score (a 0/1 knapsack over upgrade costs, exact)."""
    budget = check_bit_budget(budget, low_bits, high_bits)
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.shape != scores.values.shape or (sizes <= 0).any():
        raise InvalidParameterError(f"allot_bits needs one positive size per layer; got {sizes.shape} for "
                                    f"{len(scores)} layers.")
    unit = reduce(math.gcd, sizes.tolist())
    costs = (sizes // unit) * (high_bits - low_bits)
    allowance = int(math.floor((budget - low_bits) * int(sizes.sum()) / unit + 1e-9))
    values = np.where(np.isfinite(scores.values), scores.values, 0.0)
    chosen = set(select_budget(Scores(np.maximum(values, 0.0), ids=scores.ids), costs, budget=allowance).ids)
    return {name: high_bits if name in chosen else low_bits for name in scores.ids}
