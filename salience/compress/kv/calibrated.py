"""KV-cache policies that learn something of the model first, from a calibration text
(``policy.calibrate(model, windows)``; ``salience compress kv-eval --policy NAME --calib FILE``).

* ``qfilter`` (Q-Filters, Godey et al., 2025): queries and keys of a head share one dominant
  direction, so a key's projection on it estimates the attention every future query will pay
  it, without reading any query. Calibration: each key-value head's filter is the first right
  singular vector of its group's queries (rotary positions applied) over the calibration
  windows, oriented so that the queries project positively on it; a token scores ``<key,
  filter>``. kvpress's ``QFilterPress`` scores ``-<key, filter>`` with filters trained and
  published per model on the Hugging Face hub (none for SmolLM2, and no hub here): given the
  negated filters it scores the same.
* ``duo_attention`` (DuoAttention, Xiao et al., 2025): some heads retrieve from the whole
  context, others only read the attention sinks and the recent tokens (streaming heads,
  which keep ``sink_size`` + ``recent_size`` tokens). Calibration: kvpress's on-the-fly head
  scores (each layer's mean query and mean key over the calibration windows, repeated over
  ``q_len`` positions and rotated; a head's score is the area under the last query's
  cumulative attention curve, averaged over its group); the lowest-scoring heads of the whole
  model become streaming heads, as many as the budget needs (the cache then keeps at most the
  uniform budget's tokens in total; kvpress's ``head_compression_ratio`` is their share).
* ``kvzap`` (KVzap, Jegou and Jeblick, 2026; kvpress's ``KVzapPress``): KVzip's scores without
  its replay: a linear surrogate per layer reads each token's attention input and predicts its
  KVzip+ score for every key-value head (the log of the largest reconstruction attention x
  ``||W_O v||`` / ``||x_q||``). Calibration: KVzip+ on each calibration window
  (:func:`~salience.compress.kv.reconstruction.kvzip_plus_scores`, which needs the ``tokenizer`` for the
  reconstruction prompt), then ridge regression (alpha ``ridge``, as scikit-learn's Ridge) per
  layer. kvpress downloads surrogates trained per model (none for SmolLM2, and no hub here);
  given salience's it scores the same. Budgeted like any scorer, or with a threshold through
  ``dms`` (kvpress pairs KVzap with its threshold press).
"""

from __future__ import annotations

import abc
import math

import numpy as np

from salience.compress.kv.model_layers import attention_modules, layer_queries, rotary_of
from salience.compress.kv.policy import KVNeeds, KVPolicy, _torch
from salience.core.base import register_method
from salience.core.params import Exempt, Interval
from salience.exceptions import InvalidParameterError
from salience.extras import torch

__all__ = ["QFilter", "DuoAttention", "KVzap", "query_filters", "duo_attention_head_scores", "ridge_surrogate"]


def _model_shape(model) -> tuple[int, int, int]:
    """(decoder layers, key-value heads, head size) of a LLaMA-family model."""

    modules = attention_modules(model)
    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    return len(modules), int(heads), int(modules[0].head_dim)


def _checked_windows(windows) -> list[list[int]]:
    out = [list(map(int, w)) for w in windows]
    if not out or any(len(w) < 2 for w in out):
        raise InvalidParameterError("calibration needs at least one window of two or more tokens.")
    return out


def _attention_inputs(model, windows, collect) -> None:
    """Run the model over each calibration window; ``collect(layer, module, hidden,
    position_embeddings)`` sees every attention module's input (no cache kept)."""

    torch = _torch()
    modules = attention_modules(model)

    def hook(module, args, kwargs):
        hidden = kwargs.get("hidden_states", args[0] if args else None)
        collect(module.layer_idx, module, hidden, kwargs.get("position_embeddings"))

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in modules]
    try:
        with torch.no_grad():
            for window in windows:
                model(input_ids=torch.tensor([window]), use_cache=False)
    finally:
        for handle in handles:
            handle.remove()


def query_filters(model, windows) -> np.ndarray:
    """Q-Filters (layers, kv_heads, d): per key-value head, the first right singular vector of
    its group's rotated queries over ``windows`` (lists of token ids), oriented so that the
    queries project positively on it."""

    _torch()  # torch installed, or the error naming the extra
    windows = _checked_windows(windows)
    n_layers, n_kv, d = _model_shape(model)
    gram = np.zeros((n_layers, n_kv, d, d))
    total = np.zeros((n_layers, n_kv, d))

    def collect(layer, module, hidden, position_embeddings):
        q = layer_queries(module, hidden, position_embeddings, hidden.shape[1]).double()[0]  # (heads, n, d)
        grouped = q.reshape(n_kv, -1, d)  # a group's heads are consecutive
        gram[layer] += (grouped.transpose(1, 2) @ grouped).numpy()
        total[layer] += grouped.sum(dim=1).numpy()

    _attention_inputs(model, windows, collect)
    _, vectors = np.linalg.eigh(gram)  # ascending: the last is the first singular direction
    filters = vectors[..., -1]
    sign = np.sign(np.einsum("lhd,lhd->lh", filters, total))
    return filters * np.where(sign == 0, 1.0, sign)[..., None]


def duo_attention_head_scores(model, windows, *, q_len: int = 500) -> np.ndarray:
    """DuoAttention's on-the-fly head scores (layers, kv_heads), kvpress's recipe: each
    layer's mean query and mean key over every token of ``windows`` (projected, not rotated),
    repeated over ``q_len`` positions and rotated; the last query's attention over them; the
    mean of its cumulative sum (high: the attention reaches far back), averaged over the query
    heads of a group and over the windows."""

    torch = _torch()
    windows = _checked_windows(windows)
    if isinstance(q_len, bool) or not isinstance(q_len, int) or q_len < 2:
        raise InvalidParameterError(f"q_len must be a whole number >= 2; got {q_len!r}.")
    n_layers, n_kv, d = _model_shape(model)
    rotary = rotary_of(model)
    if rotary is None:
        raise InvalidParameterError(f"{type(model).__name__} keeps no rotary embedding as model.rotary_emb.")
    cos, sin = (torch.as_tensor(x).double() for x in rotary(torch.arange(q_len)))
    scores = np.zeros((n_layers, n_kv))

    def rotate(x):  # (heads, d) repeated over the positions: (heads, q_len, d)
        x = x[:, None, :].double().expand(-1, q_len, -1)
        half = d // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    def collect(layer, module, hidden, position_embeddings):
        b, n, _ = hidden.shape
        q = module.q_proj(hidden).view(b, n, -1, d)
        k = module.k_proj(hidden).view(b, n, -1, d)
        if hasattr(module, "q_norm"):
            q = module.q_norm(q)
        if hasattr(module, "k_norm"):
            k = module.k_norm(k)
        q, k = rotate(q.mean(dim=1)[0]), rotate(k.mean(dim=1)[0])
        groups = q.shape[0] // k.shape[0]
        keys = k.repeat_interleave(groups, dim=0)
        weights = torch.softmax((q[:, -1:, :] @ keys.transpose(1, 2))[:, 0] / math.sqrt(d), dim=-1)
        area = torch.cumsum(weights, dim=-1).mean(dim=-1)  # (heads,)
        scores[layer] += area.view(-1, groups).mean(dim=1).numpy() / len(windows)

    _attention_inputs(model, windows, collect)
    return scores


class _Calibrated(KVPolicy):
    """A policy with a parameter learned from the model (``learned`` names it); None until
    :meth:`calibrate` fills it."""

    learned: str
    learned_ndim: int  # (layers, kv heads[, head size])
    needs = KVNeeds(reads=("layer",))

    @abc.abstractmethod
    def _learn(self, model, windows) -> np.ndarray:
        """The subclass's part: the learned parameter computed from the calibration windows."""

    def calibrate(self, model, windows) -> "_Calibrated":
        """A copy with its ``learned`` parameter computed from ``windows`` (lists of token ids)."""
        return self.clone().set_params(**{self.learned: self._learn(model, windows)})

    def _validate_params(self) -> None:
        super()._validate_params()
        value = getattr(self, self.learned)
        if value is None:
            return
        array = np.asarray(value, dtype=float)
        if array.ndim != self.learned_ndim or array.size == 0 or not np.isfinite(array).all():
            raise InvalidParameterError(f"{self.learned} must be a finite {self.learned_ndim}-D array (layers, "
                                        f"key-value heads{', head size' if self.learned_ndim == 3 else ''}); got "
                                        f"shape {array.shape}.")

    def _array(self) -> np.ndarray:
        value = getattr(self, self.learned)
        if value is None:
            raise InvalidParameterError(f"policy {self.name!r} has no {self.learned}= yet: compute them with "
                                        f"policy.calibrate(model, windows) (kv-eval: --calib FILE).")
        return np.asarray(value, dtype=float)

    def check_model(self, model) -> None:
        shape = self._array().shape
        expected = _model_shape(model)[: len(shape)]
        if shape != expected:
            raise InvalidParameterError(f"policy {self.name!r}: {self.learned} of shape {shape} were learned for "
                                        f"another model; this one has (layers, kv heads, head size) "
                                        f"{_model_shape(model)}.")

    def _layer(self, layer, n_kv: int) -> np.ndarray:
        array = self._array()
        if layer is None or not 0 <= layer < array.shape[0] or array.shape[1] != n_kv:
            raise InvalidParameterError(f"policy {self.name!r}: layer {layer} with {n_kv} key-value heads is not in "
                                        f"its {self.learned} of shape {array.shape}.")
        return array[layer]


@register_method("kv", "qfilter", "KV cache: each key's projection on its head's dominant query direction, learned "
                                  "from a calibration text (Q-Filters, Godey et al., 2025)")
class QFilter(_Calibrated):
    learned, learned_ndim = "filters", 3

    _parameter_constraints = {"filters": [Exempt("the filters calibrate() learns")]}

    def __init__(self, *, filters=None):
        self.filters = filters
        super().__init__()

    def _learn(self, model, windows):
        return query_filters(model, windows)

    def _scores(self, keys, values, queries, scaling, n, layer=None):
        filters = self._layer(layer, keys.shape[1])
        if filters.shape[-1] != keys.shape[-1]:
            raise InvalidParameterError(f"policy 'qfilter': filters of size {filters.shape[-1]} for keys of size "
                                        f"{keys.shape[-1]}.")
        dtype = torch.promote_types(keys.dtype, torch.float32)
        return torch.einsum("bhnd,hd->bhn", keys.to(dtype), torch.as_tensor(filters, dtype=dtype))


@register_method("kv", "duo_attention", "KV cache: the lowest-scoring heads keep only sinks and recent tokens, the "
                                        "others everything (DuoAttention, Xiao et al., 2025; kvpress's on-the-fly "
                                        "head scores)")
class DuoAttention(_Calibrated):
    """See the module docstring. The budget sets how many heads stream: the fewest whose
    eviction brings the whole cache to ``keep`` tokens per head on average, so heads keep
    different numbers of tokens (padded and masked, as AdaKV's)."""

    learned, learned_ndim = "head_scores", 2
    needs = KVNeeds(reads=("layer", "keep"))
    _parameter_constraints = {"head_scores": [None, "array-like"], "sink_size": [Interval("int", 0)],
                              "recent_size": [Interval("int", 1)]}

    def __init__(self, *, head_scores=None, sink_size: int = 128, recent_size: int = 256):
        self.head_scores, self.sink_size, self.recent_size = head_scores, sink_size, recent_size
        super().__init__()

    def _learn(self, model, windows):
        return duo_attention_head_scores(model, windows)

    def protected(self) -> tuple[int, str]:
        return self.sink_size + self.recent_size, (f"a streaming head's {self.sink_size} sinks and "
                                                   f"{self.recent_size} recent tokens")

    def streaming_heads(self, keep: int, n: int) -> np.ndarray:
        """Which heads (layers, kv_heads) stream when ``keep`` of ``n`` tokens are kept per
        head: the lowest-scoring, as few as bring the total to the budget's."""
        scores = self._array()
        streaming = np.zeros(scores.shape, dtype=bool)
        kept_by_stream = min(n, self.sink_size + self.recent_size)
        if keep >= n or kept_by_stream >= n:
            return streaming
        count = min(scores.size, math.ceil(scores.size * (n - keep) / (n - kept_by_stream)))
        order = np.argsort(scores, axis=None, kind="stable")[:count]
        streaming[np.unravel_index(order, scores.shape)] = True
        return streaming

    def _scores(self, keys, values, queries, scaling, n, layer=None, keep=None):
        streaming = self.streaming_heads(keep, n)
        self._layer(layer, keys.shape[1])  # refuses a layer or head count the scores do not hold
        dtype = torch.promote_types(keys.dtype, torch.float32)
        scores = torch.ones(keys.shape[0], keys.shape[1], n, dtype=dtype)
        middle = slice(self.sink_size, max(self.sink_size, n - self.recent_size))
        scores[:, torch.as_tensor(streaming[layer]), middle] = 0.0
        return scores

    def evicted(self, scores, count: int) -> np.ndarray:
        """The streaming heads' middle tokens (score 0), whatever ``count``."""
        return scores <= 0


def ridge_surrogate(inputs, targets, alpha: float = 1.0) -> np.ndarray:
    """Per layer, the ridge regression of the targets (tokens, kv_heads) on the inputs (tokens,
    hidden) with an unpenalised intercept (scikit-learn's ``Ridge(alpha)``): an array (layers,
    kv_heads, hidden + 1), the intercept last."""
    out = []
    for x, y in zip(inputs, targets):
        x_mean, y_mean = x.mean(axis=0), y.mean(axis=0)
        xc, yc = x - x_mean, y - y_mean
        weights = np.linalg.solve(xc.T @ xc + alpha * np.eye(x.shape[1]), xc.T @ yc)  # (hidden, kv)
        out.append(np.concatenate([weights.T, (y_mean - x_mean @ weights)[:, None]], axis=1))
    return np.stack(out)


@register_method("kv", "kvzap", "KV cache: KVzip+ scores predicted from each token's attention input by a linear "
                                "surrogate per layer, learned from a calibration text (KVzap, Jegou and Jeblick, "
                                "2026; kvpress's KVzapPress)")
class KVzap(_Calibrated):
    """See the module docstring. ``surrogate`` (layers, kv_heads, hidden + 1): each head's
    weights over the attention input, the intercept last; the scores are the predicted log
    KVzip+ (kvpress's threshold scale: its examples use -4)."""

    learned, learned_ndim = "surrogate", 3
    needs = KVNeeds(reads=("layer", "hidden"))
    _parameter_constraints = {"surrogate": [Exempt("the surrogate calibrate() fits")],
                              "tokenizer": [Exempt("the model's tokenizer, given by the caller")],
                              "ridge": [Interval("real", 0, None, closed="neither")],
                              "chunk_size": [Interval("int", 9)]}

    def __init__(self, *, surrogate=None, tokenizer=None, ridge: float = 1.0, chunk_size: int = 2048):
        self.surrogate, self.tokenizer, self.ridge, self.chunk_size = surrogate, tokenizer, ridge, chunk_size
        super().__init__()

    def _learn(self, model, windows):
        from salience.compress.kv.reconstruction import kvzip_plus_scores

        if self.tokenizer is None:
            raise InvalidParameterError("kvzap learns from KVzip's reconstruction, which prompts the model: give "
                                        "tokenizer= before calibrate().")
        inputs, targets = [], []
        for window in _checked_windows(windows):
            x, y = kvzip_plus_scores(model, self.tokenizer, window, chunk_size=self.chunk_size)
            inputs.append(x)
            targets.append([layer.T for layer in y])  # (tokens, kv_heads) per layer
        by_layer = zip(zip(*inputs), zip(*targets))
        x, y = zip(*[(np.concatenate(xs), np.concatenate(ys)) for xs, ys in by_layer])
        return ridge_surrogate(x, y, self.ridge)

    def check_model(self, model) -> None:
        layers, n_kv, _ = _model_shape(model)
        expected = (layers, n_kv, int(model.config.hidden_size) + 1)
        if self._array().shape != expected:
            raise InvalidParameterError(f"policy 'kvzap': a surrogate of shape {self._array().shape} was learned for "
                                        f"another model; this one needs (layers, kv heads, hidden + 1) {expected}.")

    def _scores(self, keys, values, queries, scaling, n, layer=None, hidden=None):
        weights = self._layer(layer, keys.shape[1])
        if hidden.shape[1] != n or weights.shape[-1] != hidden.shape[-1] + 1:
            raise InvalidParameterError(f"policy 'kvzap': hidden states {tuple(hidden.shape)} for {n} tokens and a "
                                        f"surrogate over {weights.shape[-1] - 1} inputs.")
        dtype = torch.promote_types(hidden.dtype, torch.float32)
        w = torch.as_tensor(weights, dtype=dtype)
        # a linear layer's own kernel (as kvpress's surrogate runs): near-equal predictions order alike
        return torch.nn.functional.linear(hidden.to(dtype), w[:, :-1], w[:, -1]).transpose(1, 2)
