"""Compression by importance: which weights, structures, layers and cached tokens of a language
model matter, pruning and evicting by them, and measuring what was lost
(``pip install 'salience[lm]'``).

Seven method families, one verb each (``score``, returning :class:`~salience.Scores`):
``weights`` (:class:`WeightCriterion`: magnitude, wanda, lamp, taylor, sparsegpt), ``structure``
(:class:`StructureCriterion`: magnitude, taylor, output; of FFN channels or attention heads), ``layers``
(:class:`LayerImportance`), ``kv`` (:class:`KVPolicy`: the KV-cache policies) and
``kv_channels`` (:class:`KeyChannelPolicy`: which key channels of the cache matter, ThinK),
``quantizers`` (:class:`Quantizer`: rtn, gptq, awq; :func:`quantize` applies one to a model) and
``precision`` (:class:`PrecisionCriterion`: which layers keep more bits).
"""

from salience.compress.evaluate import perplexity, stdlib_docstrings, windows
from salience.compress.kv import (check_budget, continue_from, decode_speed, evict, kv_eval, kv_policy,
                                  kv_token_scores, passkey, passkey_prompts, policy_token_scores, prefill,
                                  prefill_and_continue, KVPolicy)
from salience.compress.kv.attention import (CAOTE, H2O, TOVA, VATP, ExpectedAttention, Finch, NonCausalAttention,
                                            PyramidKV, SnapKV)
from salience.compress.kv.calibrated import (DuoAttention, KVzap, QFilter, duo_attention_head_scores, query_filters,
                                             ridge_surrogate)
from salience.compress.kv.channels import KeyChannelPolicy, ThinK, key_channel_policy, prune_key_channels
from salience.compress.kv.compose import KVCompose
from salience.compress.kv.decoding import CaM, Decoding
from salience.compress.kv.geometry import CapKV, Compactor, CurDKV, KeyDiff, KeyNorm, LagKV, LeverageScore
from salience.compress.kv.position import StreamingLLM
from salience.compress.kv.reconstruction import KVgrad, KVzip
from salience.compress.kv.simlayer import SimLayerKV
from salience.compress.kv.wrappers import (AdaKV, BlockWise, ChunkKV, CriticalKV, EntropyGatedChunkKV, KeyRerotation,
                                           LayerBudget)
from salience.compress.layers import (BlockInfluence, LayerImportance, PerplexityChange, block_influence,
                                     drop_least_important, perplexity_change, remove_layers)
from salience.compress.structured import (STRUCTURE_UNITS, StructureCriterion, StructureMagnitude, StructureOutput,
                                         StructureReport, StructureTaylor, remove_structures, structure_criterion,
                                         structure_scores)
from salience.compress.criteria import (LAMP, Magnitude, SparseGPT, Taylor, Wanda, WeightCriterion, weight_criterion,
                                        weight_scores)
from salience.compress.weights import PruneReport, calibration_windows, prunable_linears, prune, sparsity_of
from salience.compress.quant_grid import SCHEMES, QuantizedWeight, QuantScheme, scheme_of
from salience.compress.quantizers import AWQ, GPTQ, RTN, Quantizer, quantizer_of
from salience.compress.quantize import QuantReport, outlier_mask, quantize
from salience.compress.precision import PrecisionCriterion, allot_bits, precision_criterion
from salience.compress.verify_layers import LayerVerifier
from salience.compress.verify_structures import StructureVerifier
from salience.compress.verify_kv import KVVerifier
from salience.compress.verify_weights import WeightVerifier

__all__ = ["LayerVerifier", "StructureVerifier", "KVVerifier", "WeightVerifier", "WeightCriterion", "Magnitude", "Wanda", "LAMP", "Taylor", "SparseGPT", "weight_criterion", "prune",
           "PruneReport", "prunable_linears", "calibration_windows", "weight_scores", "sparsity_of", "perplexity",
           "stdlib_docstrings", "windows", "LayerImportance", "BlockInfluence", "PerplexityChange", "block_influence",
           "perplexity_change", "remove_layers", "drop_least_important", "KVPolicy", "StreamingLLM", "H2O", "SnapKV",
           "TOVA", "KeyNorm", "VATP", "CAOTE", "KeyDiff", "LagKV", "ExpectedAttention", "PyramidKV", "NonCausalAttention", "LeverageScore", "Compactor", "CapKV", "Finch", "SimLayerKV", "AdaKV",
           "CriticalKV", "ChunkKV", "EntropyGatedChunkKV", "BlockWise", "CurDKV", "LayerBudget", "KeyRerotation", "KVzip", "KVgrad", "KVCompose", "Decoding", "CaM", "QFilter", "DuoAttention", "KVzap", "ridge_surrogate",
           "query_filters", "duo_attention_head_scores", "KeyChannelPolicy", "ThinK", "key_channel_policy", "prune_key_channels", "kv_policy", "kv_token_scores", "policy_token_scores", "evict", "prefill", "continue_from", "prefill_and_continue",
           "kv_eval", "passkey", "passkey_prompts", "decode_speed", "check_budget", "STRUCTURE_UNITS",
           "StructureCriterion", "StructureMagnitude", "StructureTaylor", "StructureOutput", "StructureReport",
           "remove_structures", "structure_criterion", "structure_scores", "SCHEMES", "QuantScheme", "QuantizedWeight", "scheme_of", "Quantizer", "RTN", "GPTQ",
           "AWQ", "quantizer_of", "quantize", "QuantReport", "outlier_mask", "PrecisionCriterion", "precision_criterion",
           "allot_bits"]
