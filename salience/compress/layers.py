"""Which decoder layers of a language model matter, and removing the others physically.

* ``block_influence`` (ShortGPT, Men et al., 2024): ``1 - cos(h_in, h_out)`` between a layer's
  input and output hidden states, averaged over the calibration tokens: a layer that barely
  turns the residual stream matters little;
* ``perplexity_change``: the calibration perplexity with the layer removed, less the full
  model's (one evaluation per layer; slower, and measured rather than inferred).

Both return :class:`~salience.Scores` over layer indices (higher: more important), so the
core's selectors choose what to keep; :func:`remove_layers` drops layers from the model (its
``config.num_hidden_layers`` and the attention layers' cache indices follow), so the model is
smaller and faster.
"""

from __future__ import annotations

import abc
import contextlib
from typing import Sequence

import numpy as np

from salience.core.base import Scorer, register_method
from salience.core.params import Interval
from salience.extras import require_torch
from salience.core.scores import Scores
from salience.compress.weights import check_calibration
from salience.models.lm import decoder_layers
from salience.exceptions import InvalidParameterError

__all__ = ["block_influence", "perplexity_change", "remove_layers", "drop_least_important", "LayerImportance",
           "BlockInfluence", "PerplexityChange", "decoder_layers"]


def block_influence(model, calibration, *, batch_size: int = 4) -> Scores:
    """ShortGPT's block influence of every decoder layer over calibration windows."""
    torch = require_torch("Layer importance")
    layers = decoder_layers(model)
    calibration = check_calibration(calibration)
    totals, counts = np.zeros(len(layers)), np.zeros(len(layers))

    def hook(index):
        def record(module, args, output):
            before = args[0] if args else None
            after = output[0] if isinstance(output, tuple) else output
            if before is None:
                return
            cos = torch.nn.functional.cosine_similarity(before.double(), after.double(), dim=-1)
            totals[index] += float((1.0 - cos).sum())
            counts[index] += cos.numel()
        return record

    handles = [layer.register_forward_hook(hook(i)) for i, layer in enumerate(layers)]
    try:
        with torch.no_grad():
            batch = torch.as_tensor(calibration)
            for lo in range(0, len(batch), batch_size):
                model(input_ids=batch[lo : lo + batch_size], use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    if not counts.all():
        raise InvalidParameterError("some decoder layers received no hidden states: the model's layers do not take "
                                    "hidden states as their first argument.")
    return Scores(totals / counts)


def perplexity_change(model, calibration, *, batch_size: int = 4) -> Scores:
    """For every layer, the calibration perplexity without it less the full model's."""
    from salience.compress.evaluate import perplexity

    decoder_layers(model)  # not a decoder: named before any work
    calibration = check_calibration(calibration)
    ids, seqlen = calibration.ravel(), calibration.shape[1]
    full = perplexity(model, ids, seqlen=seqlen, batch_size=batch_size)
    with restored_layers(model) as layers:
        out = np.zeros(len(layers))
        for i in range(len(layers)):
            _set_layers(model, layers, [j for j in range(len(layers)) if j != i])
            out[i] = perplexity(model, ids, seqlen=seqlen, batch_size=batch_size) - full
    return Scores(out)


@contextlib.contextmanager
def restored_layers(model):
    """The model's decoder layers (a list), its stack and config put back as they were on exit,
    whatever was removed meanwhile (with :func:`_set_layers`)."""
    layers = list(decoder_layers(model))
    saved = (getattr(model.config, "num_hidden_layers", None), getattr(model.config, "layer_types", None))
    try:
        yield layers
    finally:
        _set_layers(model, layers, list(range(len(layers))))
        model.config.num_hidden_layers, layer_types = saved
        if layer_types is not None:
            model.config.layer_types = layer_types


def _set_layers(model, layers: list, kept: list[int]) -> None:
    """Make ``layers[kept]`` the model's decoder stack (config and cache indices follow)."""
    torch = require_torch("Layer removal")
    holder = getattr(model, "model", model)
    config = model.config
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and len(layer_types) == len(layers):
        config.layer_types = [layer_types[i] for i in kept]
    holder.layers = torch.nn.ModuleList([layers[i] for i in kept])
    config.num_hidden_layers = len(kept)
    for position, i in enumerate(kept):
        attention = getattr(layers[i], "self_attn", None)
        if attention is not None and hasattr(attention, "layer_idx"):
            attention.layer_idx = position  # the key/value cache is indexed by position in the stack


def remove_layers(model, indices: Sequence[int]) -> list[int]:
    """Remove decoder layers by index (physically: the model gets smaller and faster); returns
    the indices kept. Unknown or repeated indices, or removing every layer, are refused."""
    layers = list(decoder_layers(model))
    indices = [int(i) for i in indices]
    drop = set(indices)
    if len(drop) != len(indices) or any(i < 0 or i >= len(layers) for i in drop):
        raise InvalidParameterError(f"layer indices must be distinct, within 0..{len(layers) - 1}; got {indices}.")
    if len(drop) >= len(layers):
        raise InvalidParameterError(f"cannot remove all {len(layers)} layers.")
    kept = [i for i in range(len(layers)) if i not in drop]
    _set_layers(model, layers, kept)
    return kept


def drop_least_important(model, n_remove: int, calibration, *, method: str = "block_influence",
                         batch_size: int = 4, **params) -> tuple[list[int], Scores]:
    """Score the decoder layers, keep the ``L - n_remove`` most important (the core's top-k
    selector; ties: the earlier layer is kept) and remove the rest physically. Returns the
    removed indices (of the original stack) and the scores. ``params``: the method's own."""
    from salience.core.base import create
    from salience.core.select import select_top_k

    scorer = create("layers", method, batch_size=batch_size, **params)
    n_layers = len(decoder_layers(model))
    if isinstance(n_remove, bool) or not isinstance(n_remove, int) or not 0 <= n_remove < n_layers:
        raise InvalidParameterError(f"the number of layers to remove must be within 0..{n_layers - 1}; got "
                                    f"{n_remove!r}.")
    scores = scorer.score(model, calibration)
    kept = set(select_top_k(scores, k=n_layers - n_remove).ids) if n_remove else set(range(n_layers))
    removed = [i for i in range(n_layers) if i not in kept]
    remove_layers(model, removed)
    return removed, scores


class LayerImportance(Scorer, abc.ABC):
    """Base of the layer-importance methods (the ``layers`` family): ``score(model,
    calibration)`` gives :class:`~salience.Scores` over decoder layer indices."""

    _parameter_constraints = {"batch_size": [Interval("int", 1)]}

    def __init__(self, *, batch_size: int = 4):
        self.batch_size = batch_size
        self._validate_params()

    @abc.abstractmethod
    def score(self, model, calibration) -> Scores:
        """The subclass's part (see the class docstring)."""

    def score_batch(self, batch) -> list[Scores]:
        return [self.score(model, calibration) for model, calibration in batch]


@register_method("layers", "block_influence", "ShortGPT block influence of decoder layers: 1 - cos(input, output) "
                                              "hidden states")
class BlockInfluence(LayerImportance):
    def score(self, model, calibration) -> Scores:
        return block_influence(model, calibration, batch_size=self.batch_size)


@register_method("layers", "perplexity_change", "calibration perplexity change when a decoder layer is removed")
class PerplexityChange(LayerImportance):
    def score(self, model, calibration) -> Scores:
        return perplexity_change(model, calibration, batch_size=self.batch_size)
