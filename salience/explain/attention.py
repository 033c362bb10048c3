"""Attention rollout and attention flow (Abnar and Zuidema, 2020) for transformer models
(``pip install 'salience[torch]'``): how much each input token feeds a position's
representation through the layers' attention.

Each layer's attention is averaged over its heads (or a ``heads`` subset), the residual
connection is added as an identity (``0.5 A + 0.5 I``) and rows are renormalised. Rollout
multiplies these matrices from the first layer to the last; flow treats them as capacities
of a layered graph and takes the maximum flow from the explained position at the top to
each input token at the bottom. Rollout mixes all paths; flow is bounded by the narrowest
path and is slower (one max-flow per token).

The model is a Hugging Face transformer (or any callable taking ``input_ids``,
``attention_mask`` and ``output_attentions=True`` and returning an object with
``attentions``: one ``(batch, heads, tokens, tokens)`` tensor per layer). Load it with
``attn_implementation="eager"``: fused attention kernels return no weights.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from salience.core.params import Interval, Options
from salience.core.base import register
from salience.exceptions import InvalidParameterError, ShapeError
from salience.explain.attribution import Attribution
from salience.explain.gradients import _torch
from salience.explain.base import Explainer
from salience.extras import torch

__all__ = ["AttentionRollout", "AttentionFlow", "attention_rollout", "attention_flow"]

#: max-flow runs on integer capacities: attention weights scaled by this
FLOW_SCALE = 10**6


def _fused(attentions: Sequence[np.ndarray], residual: bool) -> list[np.ndarray]:
    """Each layer's (tokens x tokens) head-averaged attention, the residual added, rows summing to 1."""
    out = []
    for a in attentions:
        if residual:
            a = 0.5 * a + 0.5 * np.eye(len(a))
        out.append(a / np.maximum(a.sum(axis=1, keepdims=True), 1e-12))
    return out


def attention_rollout(attentions: Sequence[np.ndarray], source: np.ndarray, *, residual: bool = True) -> np.ndarray:
    """Rollout of layer attentions (first layer first; each tokens x tokens, rows attending
    to columns) for a ``source`` weighting of the top positions: ``source @ A_L ... A_1``."""
    flow = np.asarray(source, dtype=np.float64)
    for a in reversed(_fused(attentions, residual)):
        flow = flow @ a
    return flow


def attention_flow(attentions: Sequence[np.ndarray], source: np.ndarray, *, residual: bool = True) -> np.ndarray:
    """Maximum flow from the top positions (a super-source feeding each with capacity
    ``source``) to each input token, through capacities given by the layer attentions."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import maximum_flow

    layers = _fused(attentions, residual)
    n, depth = len(layers[0]), len(layers)
    # nodes: layer l token t is l * n + t (l = 0 the inputs, depth the top); the super-source last
    super_source = (depth + 1) * n
    heads, tails, capacity = [], [], []
    for level, a in enumerate(layers, start=1):
        target_token, source_token = np.nonzero(a)  # a[i, j]: top token i draws on lower token j
        heads.append(level * n + target_token)
        tails.append((level - 1) * n + source_token)
        capacity.append(a[target_token, source_token])
    top = np.flatnonzero(source)
    heads.append(np.full(len(top), super_source))
    tails.append(depth * n + top)
    capacity.append(np.asarray(source, dtype=np.float64)[top])
    caps = np.maximum(np.round(np.concatenate(capacity) * FLOW_SCALE), 0).astype(np.int32)
    size = super_source + 1
    graph = csr_matrix((caps, (np.concatenate(heads), np.concatenate(tails))), shape=(size, size))
    graph.sum_duplicates()
    return np.array([maximum_flow(graph, super_source, t).flow_value / FLOW_SCALE for t in range(n)])


class _AttentionExplainer(Explainer):
    """Shared by rollout and flow: run the model once per batch, keep the attentions."""

    _parameter_constraints = {"position": [Options(("mean",)), Interval("int")], "layers": [None, slice, "array-like"],
                              "heads": [None, "array-like"], "residual": [bool], "pad_id": [Interval("int", 0)]}

    def __init__(self, model: Callable, *, position: int | str = 0, layers: slice | Sequence[int] | None = None,
                 heads: Sequence[int] | None = None, residual: bool = True, pad_id: int = 0, feature_names=None):
        self.position, self.layers, self.heads, self.residual, self.pad_id = position, layers, heads, residual, pad_id
        super().__init__(model, feature_names=feature_names)

    def attribute(self, inputs, *, baselines=None, target: int | None = None, n_samples: int | None = None,
                  batch_size: int | None = None, seed: int | None = 0) -> Attribution:
        """Attributions of every row of token ids (a 2-D array, or lists of unequal length,
        padded with ``pad_id`` and masked). ``baselines`` and ``target`` do not apply: the
        explained quantity is the representation at ``position``."""
        if baselines is not None or target is not None:
            raise InvalidParameterError(f"{self.name} explains the representation at position={self.position!r}: "
                                        "baselines and target do not apply.")
        ids, mask = _token_rows(inputs, self.pad_id)
        _torch()  # torch installed, or the error naming the extra
        step = batch_size or len(ids)
        values = np.zeros(ids.shape)
        for lo in range(0, len(ids), step):
            attentions = self._attentions(ids[lo : lo + step], mask[lo : lo + step])
            for r in range(attentions[0].shape[0]):
                length = int(mask[lo + r].sum())
                keep = np.flatnonzero(mask[lo + r])
                per_layer = [a[r][:, keep][:, :, keep].mean(axis=0) for a in attentions]
                source = np.zeros(length)
                if self.position == "mean":
                    source[:] = 1.0 / length
                else:
                    if not -length <= self.position < length:
                        raise InvalidParameterError(f"position {self.position} is outside row {lo + r} of {length} tokens.")
                    source[self.position] = 1.0
                values[lo + r, keep] = self._combine(per_layer, source)
        return Attribution(values, np.zeros(len(ids)), self.name, len(ids), None)

    def score(self, inputs, **options):
        """The attribution of one row of token ids as :class:`~salience.Scores` over its positions."""
        return self.attribute([list(inputs)], **options).to_scores()

    def score_batch(self, inputs, **options) -> list:
        attribution = self.attribute(inputs, **options)
        return [attribution.to_scores(r) for r in range(len(attribution))]

    def _attentions(self, ids, mask) -> list[np.ndarray]:
        with torch.no_grad():
            try:
                out = self.model(input_ids=torch.as_tensor(ids), attention_mask=torch.as_tensor(mask),
                                 output_attentions=True)
            except Exception as err:
                raise InvalidParameterError(f"the model failed on a batch of {len(ids)} token rows: "
                                            f"{type(err).__name__}: {err}") from err
        attentions = getattr(out, "attentions", None)
        if attentions is None and isinstance(out, (tuple, list)):
            attentions = out
        if not attentions or any(a is None for a in attentions):
            raise InvalidParameterError("the model returned no attention weights: load it with "
                                        "attn_implementation='eager' (fused attention returns none).")
        chosen = list(attentions)
        if self.layers is not None:
            chosen = chosen[self.layers] if isinstance(self.layers, slice) else [chosen[i] for i in self.layers]
        if not chosen:
            raise InvalidParameterError(f"layers={self.layers!r} selects no layer of {len(attentions)}.")
        out = []
        for a in chosen:
            a = a.detach().to(torch.float64).numpy()
            if a.ndim != 4 or a.shape[0] != len(ids) or a.shape[2] != a.shape[3] or a.shape[2] != ids.shape[1]:
                raise ShapeError(f"attention weights must be (batch, heads, tokens, tokens); got {a.shape} for "
                                 f"{ids.shape} token ids.")
            out.append(a[:, list(self.heads)] if self.heads is not None else a)
        return out


def _token_rows(inputs, pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, mask) from a 2-D integer array or lists of token ids."""
    if isinstance(inputs, np.ndarray) and inputs.ndim == 2:
        rows = inputs.tolist()
    else:
        rows = [list(r) for r in inputs] if isinstance(inputs, (list, tuple)) else None
    if not rows or any(not r for r in rows):
        raise ShapeError("inputs must be rows of token ids (a 2-D integer array or non-empty lists).")
    if any(not isinstance(t, (int, np.integer)) or isinstance(t, bool) for r in rows for t in r):
        raise InvalidParameterError("token ids must be integers.")
    width = max(len(r) for r in rows)
    ids = np.full((len(rows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = r
        mask[i, : len(r)] = 1
    return ids, mask


class AttentionRollout(_AttentionExplainer):
    """Attention rollout (Abnar and Zuidema, 2020): the product of the layers' residual-mixed,
    head-averaged attention, read at ``position`` (a token index, default 0, the [CLS]; or
    ``"mean"`` for mean-pooled models). Each row of values adds up to 1."""

    name = "attention_rollout"

    def _combine(self, per_layer, source):
        return attention_rollout(per_layer, source, residual=self.residual)


class AttentionFlow(_AttentionExplainer):
    """Attention flow (Abnar and Zuidema, 2020): the maximum flow from ``position`` at the last
    layer to each input token through the layers' attention as capacities (integer max-flow
    on weights scaled by 10^6)."""

    name = "attention_flow"

    def _combine(self, per_layer, source):
        return attention_flow(per_layer, source, residual=self.residual)


register("explain", "attention_rollout", AttentionRollout, "attention rollout through a transformer's layers (Abnar and "
         "Zuidema, 2020)")
register("explain", "attention_flow", AttentionFlow, "attention flow: max-flow through a transformer's attention graph "
         "(Abnar and Zuidema, 2020)")
