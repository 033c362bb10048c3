"""Compression by importance: which weights, layers and cached tokens of a language model
matter, pruning and evicting by them, and measuring what was lost (``pip install 'salience[torch]' transformers``)."""

from salience.compress.kv import (KV_POLICIES, KVImportance, check_budget, continue_from, decode_speed, evict,
                                 kv_eval, kv_token_scores, passkey, passkey_prompts, prefill)
from salience.compress.evaluate import perplexity, stdlib_docstrings, windows
from salience.compress.layers import (LAYER_CRITERIA, LayerImportance, block_influence, drop_least_important,
                                     perplexity_change, remove_layers)
from salience.compress.structured import (STRUCTURE_CRITERIA, STRUCTURE_UNITS, StructureImportance, StructureReport,
                                         remove_structures, structure_scores)
from salience.compress.weights import (CRITERIA, PRUNE_METHODS, PruneReport, WeightImportance, calibration_windows,
                                       prunable_linears, prune, sparsity_of, weight_scores)

__all__ = ["WeightImportance", "prune", "PruneReport", "prunable_linears", "calibration_windows", "weight_scores",
           "sparsity_of", "perplexity", "stdlib_docstrings", "windows", "CRITERIA", "PRUNE_METHODS",
           "LayerImportance", "block_influence", "perplexity_change", "remove_layers", "LAYER_CRITERIA",
           "drop_least_important", "KV_POLICIES", "KVImportance", "kv_token_scores", "evict", "prefill",
           "continue_from", "kv_eval", "passkey", "passkey_prompts", "decode_speed", "check_budget",
           "STRUCTURE_UNITS", "STRUCTURE_CRITERIA", "StructureImportance", "StructureReport", "remove_structures",
           "structure_scores"]
