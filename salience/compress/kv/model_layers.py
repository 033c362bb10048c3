"""What KV-cache eviction reads of a causal LM's attention layers (LLaMA-family layout): the
attention modules, the queries they compute, the model's rotary rotation, and a policy's scores
of one layer's cache with all of these (what :func:`salience.compress.kv.evict` and the
policies that read the model again share)."""

from __future__ import annotations

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.extras import torch

__all__ = ["attention_modules", "layer_queries", "rotary_of", "layer_scores"]


def attention_modules(model) -> list:
    from salience.models.lm import decoder_layers

    layers = decoder_layers(model)
    if not all(hasattr(layer, "self_attn") for layer in layers):
        raise InvalidParameterError(f"{type(model).__name__}'s decoder layers have no self_attn (LLaMA-family layout): "
                                    "its cache cannot be evicted by salience.")
    return [layer.self_attn for layer in layers]


def layer_queries(module, hidden_states, position_embeddings, count, rotated=True):
    """The last ``count`` queries of an attention module for its input, with rotary positions
    unless ``rotated`` is False (recomputed from the layer's input: attention implementations
    do not return them)."""
    hidden = hidden_states[:, -count:]
    b, q, _ = hidden.shape
    queries = module.q_proj(hidden).view(b, q, -1, module.head_dim).transpose(1, 2)
    if hasattr(module, "q_norm"):  # Gemma-3, Qwen-3: a norm on the queries before the rotation
        queries = module.q_norm(queries)
    if not rotated:
        return queries
    cos, sin = position_embeddings
    cos, sin = cos[:, -count:].unsqueeze(1), sin[:, -count:].unsqueeze(1)
    half = queries.shape[-1] // 2
    rotated = torch.cat([-queries[..., half:], queries[..., :half]], dim=-1)
    return queries * cos + rotated * sin


def rotary_of(model):
    """The model's rotary embedding as ``rotary(positions) -> (cos, sin)``, each (len, d), or
    None when it has none where LLaMA-family models keep it."""
    embedding = getattr(getattr(model, "model", model), "rotary_emb", None)
    if embedding is None:
        return None

    def rotary(positions):
        positions = torch.as_tensor(positions, dtype=torch.long)[None]
        probe = torch.zeros(1, dtype=next(model.parameters()).dtype)
        cos, sin = embedding(probe, positions)
        return cos[0], sin[0]

    return rotary


def layer_scores(policy, module, keys, values, hidden, position_embeddings, count: int, *, rotary, keep: int,
                 question: int = 0) -> np.ndarray:
    """``policy``'s scores (float64, (b, kv_heads, n)) of one attention layer's cached ``keys``
    and ``values``, read with the queries of the last ``count`` rows of ``hidden`` (the
    attention's input, at ``position_embeddings``) and whatever else the policy reads."""
    with torch.no_grad():
        queries = (layer_queries(module, hidden, position_embeddings, count, policy.needs.rotated_queries)
                   if count else None)
        scores = policy.token_scores(keys, values, queries, scaling=getattr(module, "scaling", None), rotary=rotary,
                                     output_weight=output_weight_of(module, policy), keep=keep, layer=module.layer_idx,
                                     question=question, hidden=hidden)
    return scores.double().numpy().copy()


def output_weight_of(module, policy):
    if "output_weight" not in policy.needs.reads:
        return None
    weight = getattr(module.o_proj, "weight", None)
    if weight is None:
        raise InvalidParameterError(f"policy {policy.name!r} reads the attention's output projection, which "
                                    f"{type(module.o_proj).__name__} does not expose as .weight.")
    return weight
