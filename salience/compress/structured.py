"""Which FFN channels and attention heads of a decoder matter, and removing the others
physically so that the model is smaller and faster (``pip install 'salience[torch]'
transformers``).

Units, each a group of weights that lives or dies together:

* ``ffn_channels``: channel c of a gated MLP, its rows of ``gate_proj`` and ``up_proj`` and its
  column of ``down_proj``;
* ``attention_heads``: a key/value head with the query heads that share it (one grouped-query
  group): its rows of ``q_proj``, ``k_proj``, ``v_proj`` and its columns of ``o_proj``. Removing
  single query heads would leave groups of unequal size, which the attention does not allow.

Criteria, the ``structure`` family's methods (``criterion=``, each with the ``unit`` it scores):

* ``magnitude``: the L2 norm of the unit's weights;
* ``taylor``: ``sum |W x dL/dW|`` over the unit's weights, the first-order change of the
  calibration loss when the unit is removed (LLM-Pruner's element-wise estimate, Ma et al.,
  2023);
* ``output``: the magnitude of what the unit writes to the residual stream, ``||a_u|| x
  ||W_out[:, u]||`` with ``a_u`` the unit's activations over the calibration tokens (the input
  of ``down_proj``, of ``o_proj``), as 2SSP's first stage ranks FFN neurons (Sandri et al.,
  2025).

A new criterion is one subclass of :class:`StructureCriterion` registered in the family: its
``_layer_values`` gives one array per decoder layer.

Every decoder layer loses the same number of units (the core's lowest-k selector per layer,
ties to the earlier unit), so the model's config still describes it: ``intermediate_size``,
or ``num_attention_heads`` and ``num_key_value_heads`` (with ``head_dim`` kept), and the pruned
model saves and reloads as an ordinary one.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field

import numpy as np

from salience.core.base import Scorer, method_of, register_method, registered_name
from salience.core.params import Interval, Options
from salience.extras import require_torch
from salience.core.scores import Scores
from salience.core.masks import lowest_k_mask
from salience.exceptions import InvalidParameterError
from salience.extras import torch

__all__ = ["STRUCTURE_UNITS", "structure_criterion", "structure_scores", "remove_structures", "StructureReport",
           "StructureCriterion", "StructureMagnitude", "StructureTaylor", "StructureOutput"]

#: the units a model loses or keeps whole (the ``unit`` of every ``structure`` criterion)
STRUCTURE_UNITS = ("ffn_channels", "attention_heads")


def _torch():
    return require_torch("Structured pruning")


def _blocks(model):
    from salience.models.lm import decoder_layers

    layers = decoder_layers(model)
    for i, layer in enumerate(layers):
        mlp, attn = getattr(layer, "mlp", None), getattr(layer, "self_attn", None)
        if mlp is None or attn is None or not all(hasattr(mlp, n) for n in ("gate_proj", "up_proj", "down_proj")) \
                or not all(hasattr(attn, n) for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
            raise InvalidParameterError(f"decoder layer {i} of {type(model).__name__} is not a gated MLP + attention "
                                        "block with gate/up/down and q/k/v/o projections (LLaMA-family layout).")
    return layers


def _unit_groups(layer, unit: str):
    """(weights that are cut by rows, weights cut by columns, unit size in rows/columns, units)."""
    if unit == "ffn_channels":
        mlp = layer.mlp
        return [mlp.gate_proj, mlp.up_proj], [mlp.down_proj], 1, mlp.gate_proj.out_features
    attn = layer.self_attn
    return [attn.q_proj, attn.k_proj, attn.v_proj], [attn.o_proj], attn.head_dim, attn.k_proj.out_features // attn.head_dim


def _per_unit(tensor, unit: str, layer, axis: int):
    """Sum a per-weight quantity ``tensor`` (shaped like a weight) over each unit: rows (axis 0)
    or columns (axis 1) grouped per unit; query heads grouped with their key/value head."""
    per_line = tensor.sum(dim=1 - axis)  # one value per row (axis 0) or column (axis 1)
    if unit == "ffn_channels":
        return per_line
    attn = layer.self_attn
    n_kv = attn.k_proj.out_features // attn.head_dim
    return per_line.reshape(n_kv, -1).sum(dim=1)  # q rows / o columns: groups x heads x head_dim in order


def _unit_of_weights(layer, unit: str, quantity) -> "np.ndarray":
    rows, cols, _, _ = _unit_groups(layer, unit)
    total = sum(_per_unit(quantity(m), unit, layer, 0) for m in rows)
    total = total + sum(_per_unit(quantity(m), unit, layer, 1) for m in cols)
    return total.double().numpy()


def structure_criterion(criterion, unit: str = "ffn_channels", **params) -> StructureCriterion:
    """``criterion`` as a :class:`StructureCriterion` scoring ``unit``: a registered
    ``structure`` name built with ``params``, or one built already (for that unit)."""
    if isinstance(criterion, StructureCriterion) and criterion.unit != unit:
        raise InvalidParameterError(f"the criterion given scores {criterion.unit}; unit={unit!r} asks for another unit "
                                    "(build it with that unit, or pass the same unit).")
    extra = {} if isinstance(criterion, StructureCriterion) else {"unit": unit}
    return method_of("structure", criterion, StructureCriterion, **extra, **params)


def structure_scores(model, unit: str = "ffn_channels", *, criterion="magnitude", calibration=None,
                     **params) -> list[Scores]:
    """One :class:`~salience.Scores` per decoder layer over its units (``ffn_channels``: the
    MLP channels; ``attention_heads``: the key/value groups), by ``criterion`` (a registered
    ``structure`` name, with its ``params``, or a :class:`StructureCriterion`); ``taylor`` and
    ``output`` need ``calibration`` token windows (samples, seqlen)."""
    return structure_criterion(criterion, unit, **params).layer_scores(model, calibration)


@dataclass
class StructureReport:
    """What :func:`remove_structures` did: the unit, criterion, units removed per layer (their
    indices), units before and after, parameters before and after, and the seconds spent."""

    unit: str
    criterion: str
    removed: list = field(default_factory=list)
    units_before: int = 0
    units_after: int = 0
    parameters_before: int = 0
    parameters_after: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(vars(self))


def _sliced(linear, keep, axis: int):
    """A new Linear holding only rows (axis 0) or columns (axis 1) ``keep`` of ``linear``."""
    weight = linear.weight.detach().index_select(axis, keep).clone()
    bias = None if linear.bias is None else (linear.bias.detach()[keep].clone() if axis == 0 else linear.bias.detach().clone())
    new = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, dtype=weight.dtype,
                          device=weight.device)
    with torch.no_grad():
        new.weight.copy_(weight)
        if bias is not None:
            new.bias.copy_(bias)
    return new


def check_structure_options(unit: str, criterion, fraction, count, has_calibration: bool,
                            **params) -> StructureCriterion:
    """:func:`remove_structures`' options checked without a model (the CLI checks them before
    loading one), the criterion built; ``count`` against the model's units is checked once it
    is loaded."""
    criterion = structure_criterion(criterion, unit, **params)
    if (fraction is None) == (count is None):
        raise InvalidParameterError("give exactly one of fraction= (of each layer's units) or count= (per layer).")
    if fraction is not None and (isinstance(fraction, bool) or not isinstance(fraction, (int, float))
                                 or not 0 <= fraction < 1):
        raise InvalidParameterError(f"fraction must be in [0, 1); got {fraction!r}.")
    if criterion.needs_calibration and not has_calibration:
        raise InvalidParameterError(f"criterion {criterion.name!r} needs calibration token windows (CLI: --calib FILE).")
    return criterion


def remove_structures(model, unit: str = "ffn_channels", *, fraction: float | None = None, count: int | None = None,
                      criterion="magnitude", calibration=None, **params) -> StructureReport:
    """Remove the least important ``fraction`` (or ``count``) of each decoder layer's units,
    physically: the linear layers are replaced by smaller ones and the config follows.
    ``criterion``: a registered ``structure`` name (built with ``params``) or a
    :class:`StructureCriterion`."""
    torch = _torch()
    criterion = check_structure_options(unit, criterion, fraction, count, calibration is not None, **params)
    start = time.perf_counter()
    layers = _blocks(model)
    n_units = _unit_groups(layers[0], unit)[3]
    if fraction is not None:
        count = int(n_units * fraction)
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or not 0 <= count < n_units:
        raise InvalidParameterError(f"count must be within 0..{n_units - 1} (each layer has {n_units} {unit}); "
                                    f"got {count!r}.")
    scores = criterion.layer_scores(model, calibration)
    before = sum(p.numel() for p in model.parameters())
    # the core's selector, one row per layer: exactly `count` lowest units, ties to the earlier
    dropped = lowest_k_mask(np.stack([s.values for s in scores]), count)
    report = StructureReport(unit, criterion.name, units_before=n_units, units_after=n_units - count,
                             parameters_before=before)
    for layer, drop in zip(layers, dropped):
        rows, cols, size, _ = _unit_groups(layer, unit)
        kept_units = np.flatnonzero(~drop)
        report.removed.append(np.flatnonzero(drop).tolist())
        owner = layer.mlp if unit == "ffn_channels" else layer.self_attn
        for linear in rows + cols:
            name = next(n for n, m in owner.named_children() if m is linear)
            axis = 0 if linear in rows else 1
            if unit == "ffn_channels" or name in ("k_proj", "v_proj"):
                width = size if name in ("k_proj", "v_proj") else 1
            else:  # q rows / o columns: each key/value group holds num_key_value_groups heads
                width = size * layer.self_attn.num_key_value_groups
            keep = torch.as_tensor((kept_units[:, None] * width + np.arange(width)[None, :]).ravel())
            setattr(owner, name, _sliced(linear, keep, axis))
    config = model.config
    if unit == "ffn_channels":
        config.intermediate_size = n_units - count
    else:
        attn = layers[0].self_attn
        config.head_dim = attn.head_dim  # kept explicit: hidden_size / heads no longer gives it
        config.num_key_value_heads = n_units - count
        config.num_attention_heads = (n_units - count) * attn.num_key_value_groups
    report.parameters_after = sum(p.numel() for p in model.parameters())
    report.seconds = time.perf_counter() - start
    return report


class StructureCriterion(Scorer, abc.ABC):
    """Base of the ``structure`` family, one class per criterion: ``score(model,
    calibration=None)`` gives :class:`~salience.Scores` over every decoder layer's ``unit``
    (ids ``"layer:unit"``); :meth:`layer_scores` the same, one per layer."""

    #: whether the criterion reads calibration token windows
    needs_calibration = False
    _parameter_constraints = {"unit": [Options(STRUCTURE_UNITS)]}

    def __init__(self, *, unit: str = "ffn_channels"):
        self.unit = unit
        self._validate_params()

    @property
    def name(self) -> str:
        return registered_name(self, "structure")

    def layer_scores(self, model, calibration=None) -> list[Scores]:
        _torch()  # torch installed, or the error naming the extra
        layers = _blocks(model)
        windows = None
        if self.needs_calibration:
            from salience.compress.weights import check_calibration

            if calibration is None:
                raise InvalidParameterError(f"criterion {self.name!r} needs calibration token windows.")
            windows = check_calibration(calibration)
        values = self._layer_values(model, layers, windows)
        return [Scores(v, ids=[f"{i}:{u}" for u in range(len(v))]) for i, v in enumerate(values)]

    def score(self, model, calibration=None) -> Scores:
        per_layer = self.layer_scores(model, calibration)
        return Scores(np.concatenate([s.values for s in per_layer]), ids=[i for s in per_layer for i in s.ids])

    def score_batch(self, batch) -> list[Scores]:
        return [self.score(*(item if isinstance(item, tuple) else (item,))) for item in batch]

    @abc.abstractmethod
    def _layer_values(self, model, layers, windows) -> list[np.ndarray]:
        """One importance per unit of each decoder layer in ``layers`` (``windows``: the checked
        calibration windows, or None)."""


@register_method("structure", "magnitude", "FFN channels (gate/up rows + down column) or attention key/value groups "
                                           "by the L2 norm of their weights")
class StructureMagnitude(StructureCriterion):
    def _layer_values(self, model, layers, windows):
        return [np.sqrt(_unit_of_weights(layer, self.unit, lambda m: m.weight.detach().double() ** 2))
                for layer in layers]


class _Calibrated(StructureCriterion):
    """A criterion read from calibration windows, ``batch_size`` of them per forward pass."""

    needs_calibration = True
    _parameter_constraints = {**StructureCriterion._parameter_constraints, "batch_size": [Interval("int", 1)]}

    def __init__(self, *, unit: str = "ffn_channels", batch_size: int = 4):
        self.batch_size = batch_size
        super().__init__(unit=unit)

    def _outputs(self, layers):
        return [(f"{i}", _unit_groups(layer, self.unit)[1][0]) for i, layer in enumerate(layers)]


@register_method("structure", "taylor", "FFN channels or attention key/value groups by weight x gradient "
                                        "(absolute, summed over their weights) on calibration text (LLM-Pruner's "
                                        "first-order estimate)")
class StructureTaylor(_Calibrated):
    def _layer_values(self, model, layers, windows):
        from salience.compress.weights import collect_statistics

        for p in model.parameters():
            p.grad = None
        model.zero_grad(set_to_none=True)
        collect_statistics(model, self._outputs(layers), windows, batch_size=self.batch_size, hessian=False,
                           gradients=True)
        values = [_unit_of_weights(layer, self.unit, lambda m: (m.weight.detach() * m.weight.grad).abs().double())
                  for layer in layers]
        model.zero_grad(set_to_none=True)
        return values


@register_method("structure", "output", "FFN channels or attention key/value groups by the magnitude of what they "
                                        "write to the residual stream on calibration text (2SSP's first stage)")
class StructureOutput(_Calibrated):
    def _layer_values(self, model, layers, windows):
        from salience.compress.weights import collect_statistics

        outputs = self._outputs(layers)
        stats = collect_statistics(model, outputs, windows, batch_size=self.batch_size, hessian=False, gradients=False)
        values = []
        for (name, out_proj), layer in zip(outputs, layers):
            activation = stats[name].sq_norms  # per input column of the output projection: sum of a^2
            column = (out_proj.weight.detach().double() ** 2).sum(dim=0)
            if self.unit == "attention_heads":
                n_kv = layer.self_attn.k_proj.out_features // layer.self_attn.head_dim
                activation, column = activation.reshape(n_kv, -1).sum(1), column.reshape(n_kv, -1).sum(1)
            values.append((activation.sqrt() * column.sqrt()).numpy())
        return values
