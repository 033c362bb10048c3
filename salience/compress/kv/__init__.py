"""KV-cache compression: which cached tokens (and key channels) of a causal language model
matter, evicting by them, and measuring what was lost.

* :mod:`~salience.compress.kv.eviction`: :func:`evict`, :func:`prefill` and the continuation
  on an evicted cache (the machinery every policy runs in), reading the model's attention
  layers through :mod:`~salience.compress.kv.model_layers`;
* the ``kv`` family's base, :class:`~salience.compress.kv.policy.KVPolicy` (what each needs from
  eviction in one :class:`~salience.compress.kv.policy.KVNeeds`), and its policies by
  idea: :mod:`~salience.compress.kv.position` (the baselines), :mod:`~salience.compress.kv.attention`
  (the attention the prompt pays), :mod:`~salience.compress.kv.geometry` (the keys' and values'
  own geometry), :mod:`~salience.compress.kv.compose`, :mod:`~salience.compress.kv.simlayer`,
  :mod:`~salience.compress.kv.reconstruction` (reading the context again) and
  :mod:`~salience.compress.kv.calibrated` (learned from a calibration text);
* :mod:`~salience.compress.kv.wrappers` (how another policy's scores are used) and
  :mod:`~salience.compress.kv.decoding` (cutting the cache while decoding);
* :mod:`~salience.compress.kv.channels`: the ``kv_channels`` family (which key channels matter);
* :mod:`~salience.compress.kv.evaluation`: perplexity, passkey retrieval and decoding speed.
"""

from salience.compress.kv.eviction import (Prefill, attend_kept, check_budget, continue_from, evict, kv_policy,
                                           policy_token_scores, prefill, prefill_and_continue)
from salience.compress.kv.evaluation import decode_speed, kv_eval, passkey, passkey_prompts
from salience.compress.kv.policy import KVNeeds, KVPolicy, kv_token_scores
# each registers its policies, in this order (the order `salience methods` lists them)
from salience.compress.kv import position, attention, geometry, compose, simlayer, reconstruction  # noqa: F401, I001
from salience.compress.kv import calibrated, wrappers, decoding, channels  # noqa: F401

__all__ = ["evict", "prefill", "continue_from", "prefill_and_continue", "attend_kept", "Prefill", "check_budget",
           "kv_policy", "policy_token_scores", "kv_eval", "passkey", "passkey_prompts", "decode_speed", "KVNeeds", "KVPolicy",
           "kv_token_scores"]
