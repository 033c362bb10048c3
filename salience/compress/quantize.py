"""Quantizing a language model's decoder: every linear layer of its blocks put on an integer
grid by a ``quantizers`` method (rtn, gptq, awq), one scheme for all or bits per layer (mixed
precision: :mod:`salience.compress.precision`), then saved as integer files and run with
integer kernels (:mod:`salience.models.quantized`).

Calibrated methods run block by block (as llm-compressor's sequential pipeline does): each
block's layers see the inputs the already-quantized blocks produce. GPTQ quantizes layers that
share an input (q/k/v, gate/up) as one stacked matrix (rows are independent given the
Hessian). AWQ's scales are searched per group of layers sharing an input and folded into the
operation before it (the block's norm; for the down projection, the up projection's rows),
which needs the model family's block layout (:data:`LAYOUTS`).

After :func:`quantize`, each quantized layer keeps float weights equal to its dequantized
values (so perplexity is that of the quantized model, in float32) and carries its codes as
``salience_quantized``; :func:`salience.models.quantized.to_integer_modules` swaps in the
integer modules and :func:`salience.models.quantized_files.save_quantized` writes the folder.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from salience.compress.quant_grid import QuantScheme, check_groups, quantize_rtn, scheme_of
from salience.compress.quantizers import AWQ, GPTQ, Quantizer, output_error, quantizer_of
from salience.compress.weights import blockwise, check_calibration, collect_statistics, prunable_linears
from salience.core.base import method_factory, registered_name
from salience.exceptions import InvalidParameterError
from salience.extras import require_torch

__all__ = ["quantize", "QuantReport", "LAYOUTS", "block_layout", "check_quantize_options", "outlier_mask"]

#: what an outlier adds to the file: its float16 value and its 32-bit position in the matrix
OUTLIER_BITS = 48

#: per model family: the norm before attention, the norm before the MLP, and whether the norm
#: multiplies by (1 + weight) (Gemma's) instead of weight
LAYOUTS = {
    "llama": ("input_layernorm", "post_attention_layernorm", False),
    "mistral": ("input_layernorm", "post_attention_layernorm", False),
    "qwen2": ("input_layernorm", "post_attention_layernorm", False),
    "qwen3": ("input_layernorm", "post_attention_layernorm", False),
    "gemma": ("input_layernorm", "post_attention_layernorm", True),
    "gemma2": ("input_layernorm", "pre_feedforward_layernorm", True),
    "gemma3_text": ("input_layernorm", "pre_feedforward_layernorm", True),
}


#: Each calibration batch's X^T X multiplied in float32 (summed over batches in float64), chosen
#: on Gemma-3-270M's dev windows: GPTQ W4 g128 perplexity 95.121 against 99.813 with float64
#: products, 47.7 s against 51.3 s (a process's second call). That a rounding-level change moves
#: it by 5% is GPTQ's sensitivity there, not float32's cost. SparseGPT keeps float64 products
#: (float32 moved its 2:4 results).
GRAM_DTYPE = "float32"


def block_layout(model):
    """(attention norm, MLP norm, offset norm) of the model's family, or an error naming it."""
    family = getattr(model.config, "model_type", type(model).__name__)
    if family not in LAYOUTS:
        raise InvalidParameterError(f"AWQ folds its scales into the layers before; it does not know the block layout "
                                    f"of the model family {family!r} (known: {', '.join(sorted(LAYOUTS))}). Use "
                                    "method='gptq' or 'rtn', which need no layout.")
    return LAYOUTS[family]


@dataclass
class QuantReport:
    """What :func:`quantize` did: per layer (name, shape, bits, group size, output error), the
    average bits per weight, and seconds spent."""

    method: str
    scheme: dict
    layers: list[dict] = field(default_factory=list)
    seconds: dict = field(default_factory=dict)

    @property
    def average_bits(self) -> float:
        """Bits per weight of the codes, plus each outlier's float16 value and 32-bit index."""
        total = sum(r["weights"] for r in self.layers)
        stored = sum(r["weights"] * r["bits"] + OUTLIER_BITS * r.get("outliers", 0) for r in self.layers)
        return stored / total if total else 0.0

    def as_dict(self) -> dict:
        return {"method": self.method, "scheme": self.scheme, "average_bits": self.average_bits,
                "seconds": self.seconds, "layers": self.layers}

    def table(self) -> str:
        lines = [f"{'layer':<44} {'shape':>12} {'bits':>4} {'output error':>13}"]
        for r in self.layers:
            error = "" if r.get("output_error") is None else f"{r['output_error']:.4g}"
            lines.append(f"{r['name']:<44} {str(tuple(r['shape'])):>12} {r['bits']:>4} {error:>13}")
        lines.append(f"average bits per weight: {self.average_bits:.3f}")
        return "\n".join(lines)


def check_quantize_options(method, scheme, *, group_size=..., symmetric=None, bits: Mapping[str, int] | None = None,
                           has_calibration: bool, outliers: float = 0.0, outlier_criterion: str = "wanda",
                           **params) -> tuple[Quantizer, QuantScheme]:
    """``quantize``'s options checked without a model (the CLI checks them before loading one)."""
    if isinstance(outliers, bool) or not isinstance(outliers, (int, float)) or not 0 <= outliers < 0.5:
        raise InvalidParameterError(f"outliers is the share of each layer's weights kept in float16, in [0, 0.5); "
                                    f"got {outliers!r}.")
    if outliers:
        from salience.compress.criteria import weight_criterion

        judge = weight_criterion(outlier_criterion)
        if judge.needs not in (None, "input_norms"):
            raise InvalidParameterError(f"outlier_criterion {outlier_criterion!r} needs {judge.needs}; outliers are "
                                        "chosen by a criterion of the weights alone or of their inputs' norms "
                                        "(magnitude, wanda, lamp).")
        if judge.needs == "input_norms" and not has_calibration:
            raise InvalidParameterError(f"outlier_criterion {outlier_criterion!r} needs calibration windows (the "
                                        "inputs' norms); give them, or outlier_criterion='magnitude'.")
        kind = method_factory("quantizers", method) if isinstance(method, str) else type(method)
        if getattr(kind, "scales_inputs", False):
            name = method if isinstance(method, str) else registered_name(method, "quantizers")
            raise InvalidParameterError(f"{name} scales whole input columns; it does not keep outliers (use rtn or "
                                        "gptq).")
    scheme = scheme_of(scheme, **({} if group_size is ... else {"group_size": group_size}), symmetric=symmetric)
    quantizer = quantizer_of(method, bits=scheme.bits, group_size=scheme.group_size, symmetric=scheme.symmetric,
                             **params)
    if quantizer.needs_hessian and not has_calibration:
        raise InvalidParameterError(f"{registered_name(quantizer, 'quantizers')} needs calibration windows of token "
                                    "ids (calibration_windows; CLI: --calib FILE).")
    if scheme.activation_bits is not None and bits and any(b != 8 for b in bits.values()):
        raise InvalidParameterError("w8a8 keeps every layer at 8 bits: it does not combine with bits per layer.")
    check_group_size_pays(scheme)
    return quantizer, scheme


def check_group_size_pays(scheme: QuantScheme) -> None:
    """Refuse groups so small that their float32 scales (and 8-bit zero points) make the file
    larger than 8-bit weights with one scale per row."""
    g = scheme.group_size
    if g is None or scheme.bits >= 8:
        return
    overhead = 32 + (0 if scheme.symmetric else 8)  # bits stored per group
    stored = scheme.bits + overhead / g
    if stored >= 8:
        smallest = overhead // (8 - scheme.bits) + 1
        raise InvalidParameterError(
            f"groups of {g} store {stored:.2f} bits a weight at {scheme.bits} bits (a float32 scale"
            f"{'' if scheme.symmetric else ' and a zero point'} per group): a larger file than 8-bit weights with a "
            f"scale per row. Use groups of more than {smallest - 1} (typically 32 to 128), or the w8a16_channel scheme.")


def default_group_size(layers, scheme: QuantScheme) -> QuantScheme:
    """The scheme with its group size halved, if need be, until it divides every layer's width
    (SmolLM2's 576 inputs take groups of 64, not the preset's 128): a default that always runs.
    Unchanged when no such size of 16 or more is found (the error then names the widths)."""
    g = scheme.group_size
    if g is None:
        return scheme
    widths = {module.weight.shape[1] for _, module in layers}
    while g >= 16:
        if all(w % g == 0 for w in widths):
            return scheme if g == scheme.group_size else QuantScheme(**{**scheme.as_dict(), "group_size": g})
        g //= 2
    return scheme


def quantize(model, *, method: str | Quantizer = "gptq", scheme: str | QuantScheme = "w4a16", group_size=...,
             symmetric: bool | None = None, calibration=None, bits: Mapping[str, int] | None = None,
             bit_budget: float | None = None, criterion: str = "fisher", high_bits: int = 6, ragged: bool = False,
             embeddings: bool = False, batch_size: int = 4, sequential: bool = True, outliers: float = 0.0,
             outlier_criterion: str = "wanda", **params) -> QuantReport:
    """Quantize ``model``'s decoder linear layers in place (see the module docstring).

    ``method``: a registered ``quantizers`` method (built with ``params``: gptq's
    ``blocksize``, ``damp``, ``actorder``; awq's ``n_grid``). ``scheme``: a name of
    :data:`~salience.compress.quant_grid.SCHEMES` or a QuantScheme; ``group_size`` and
    ``symmetric`` override it. ``bits``: bits per layer name (mixed precision; layers not named
    keep the scheme's). ``bit_budget``: instead, an average of bits per weight: the ``precision``
    ``criterion`` scores the layers and :func:`~salience.compress.precision.allot_bits` gives
    the scheme's bits or ``high_bits`` to each. ``ragged``: allow a group size that does not
    divide a layer's width. ``embeddings``: also store the token embeddings (and a tied output head) as 8-bit rows.
    ``outliers``: the share of each layer's weights kept exact in float16 (outlier-aware
    quantization, after SpQR): the most important by ``outlier_criterion`` (a ``weights``
    criterion: wanda's |w| x ||x|| by default, or magnitude), left out of the grids; GPTQ keeps
    their updated values and spreads no error from them.
    ``calibration``: token-id windows (samples, seqlen), needed by gptq and awq."""
    require_torch("Quantization")  # the error naming the extra comes first
    began = time.perf_counter()
    quantizer, scheme = check_quantize_options(method, scheme, group_size=group_size, symmetric=symmetric, bits=bits,
                                               has_calibration=calibration is not None, outliers=outliers,
                                               outlier_criterion=outlier_criterion, **params)
    keep = (outliers, outlier_criterion) if outliers else None
    layers = prunable_linears(model)
    if group_size is ... and not ragged:  # the preset's group size, halved where the model needs it
        scheme = default_group_size(layers, scheme)
        quantizer = _for_scheme(quantizer, scheme)
    for name, module in layers:  # every scheme here shares the group size: checked before any work
        check_groups(name, module.weight.shape[1], scheme, ragged)
    if bit_budget is not None:
        if bits:
            raise InvalidParameterError("give bits per layer or a bit budget, not both.")
        from salience.compress.precision import allot_bits, check_bit_budget, precision_criterion

        check_bit_budget(bit_budget, scheme.bits, high_bits)
        judge = precision_criterion(criterion, low_bits=scheme.bits, high_bits=high_bits,
                                    group_size=scheme.group_size, batch_size=batch_size)
        if judge.needs_calibration and calibration is None:
            raise InvalidParameterError(f"the {criterion} criterion needs calibration windows.")
        start = time.perf_counter()
        sensitivity = judge.score(model, calibration)
        sizes = [model.get_submodule(name).weight.numel() for name in sensitivity.ids]
        bits = allot_bits(sensitivity, sizes, budget=bit_budget, low_bits=scheme.bits, high_bits=high_bits)
        sensitivity_seconds = time.perf_counter() - start
    names = {name for name, _ in layers}
    unknown = sorted(set(bits or {}) - names)
    if unknown:
        raise InvalidParameterError(f"bits given for layers the model does not have: {unknown[:5]}.")
    schemes = {name: scheme if not bits or name not in bits else
               QuantScheme(**{**scheme.as_dict(), "bits": int(bits[name])}) for name, _ in layers}
    if quantizer.scales_inputs:
        block_layout(model)
    reads_inputs = quantizer.needs_hessian or (keep is not None and calibration is not None)
    if reads_inputs:
        calibration = check_calibration(calibration)
    report = QuantReport(registered_name(quantizer, "quantizers"), scheme.as_dict())
    if bit_budget is not None:
        report.seconds["sensitivity"] = sensitivity_seconds
        report.scheme.update(bit_budget=bit_budget, criterion=criterion, high_bits=high_bits)
    start = time.perf_counter()
    if not reads_inputs:
        for name, module in layers:
            weight = module.weight.detach()
            mask = None if keep is None else outlier_mask(weight, *keep)
            _apply(module, name, _for_scheme(quantizer, schemes[name]).quantize(weight, keep=mask), None, report)
    elif sequential:
        blockwise(model, layers, calibration, batch_size, hessian=True, gram_dtype=GRAM_DTYPE,
                  work=lambda in_block, stats: _quantize_block(model, in_block, stats, quantizer, schemes, report,
                                                               keep))
    else:
        stats = collect_statistics(model, layers, calibration, batch_size=batch_size, hessian=True, gradients=False,
                                   gram_dtype=GRAM_DTYPE)
        for index in sorted({_block_index(name) for name in names}):
            in_block = [(n, m) for n, m in layers if _block_index(n) == index]
            _quantize_block(model, in_block, stats, quantizer, schemes, report, keep)
    for name, module in layers:  # the codes carry the layer's whole scheme (w8a8's activations too)
        module.salience_quantized.scheme = schemes[name]
    if embeddings:
        from salience.models.quantized import quantize_embeddings

        quantize_embeddings(model)
    report.seconds["quantization"] = time.perf_counter() - start
    report.seconds["total"] = time.perf_counter() - began
    order = {name: i for i, (name, _) in enumerate(layers)}
    report.layers.sort(key=lambda r: order[r["name"]])
    return report


def _block_index(name: str) -> int:
    parts = name.split(".")
    return int(parts[parts.index("layers") + 1])


def _for_scheme(quantizer: Quantizer, scheme: QuantScheme) -> Quantizer:
    """The quantizer with the scheme's bits, group size and symmetry (itself when they agree)."""
    if quantizer.scheme == QuantScheme(scheme.bits, scheme.group_size, scheme.symmetric):
        return quantizer
    return type(quantizer)(**{**quantizer.get_params(), "bits": scheme.bits, "group_size": scheme.group_size,
                              "symmetric": scheme.symmetric})


def _hessian_of(stats) -> Any:
    return stats.hessian / max(stats.tokens, 1)


def _apply(module, name: str, q, hessian, report: QuantReport) -> None:
    """Give the layer its dequantized weights and codes; record it (with the output error
    against its weights before, under ``hessian``)."""
    torch = require_torch("Quantization")
    before = module.weight.detach().clone()
    with torch.no_grad():
        module.weight.copy_(q.dequantize(module.weight.dtype))
    module.salience_quantized = q
    report.layers.append({"name": name, "shape": list(q.shape), "weights": int(np.prod(q.shape)),
                          "bits": q.scheme.bits, "group_size": q.scheme.group_size, "outliers": q.outlier_count,
                          "output_error": None if hessian is None else output_error(before, module.weight.detach(),
                                                                                     hessian)})


def _shared_inputs(in_block, stats) -> list[list[tuple[str, Any]]]:
    """The block's layers grouped by identical input statistics (layers fed the same tensor)."""
    groups: list[list] = []
    for name, module in in_block:
        for group in groups:
            first = stats[group[0][0]]
            if first.tokens == stats[name].tokens and first.hessian.shape == stats[name].hessian.shape and \
                    bool((first.hessian == stats[name].hessian).all()):
                group.append((name, module))
                break
        else:
            groups.append([(name, module)])
    return groups


def outlier_mask(weight, share: float, criterion: str = "wanda", hessian=None):
    """The ``share`` of ``weight``'s entries most important by the ``weights`` criterion
    ``criterion`` (wanda reads the inputs' norms, the square roots of ``hessian``'s diagonal),
    as a boolean mask of its shape."""
    torch = require_torch("Quantization")
    from salience.compress.criteria import weight_criterion

    judge = weight_criterion(criterion)
    norms = None
    if judge.needs == "input_norms":
        if hessian is None:
            raise InvalidParameterError(f"outlier_criterion {criterion!r} needs calibration windows.")
        norms = torch.sqrt(torch.clamp(torch.diagonal(hessian), min=0.0)).numpy()
    importance = torch.as_tensor(judge.importance(weight.detach().double().numpy(), input_norms=norms))
    count = int(round(share * importance.numel()))
    mask = torch.zeros(importance.numel(), dtype=torch.bool)
    if count:
        mask[torch.topk(importance.reshape(-1), count).indices] = True
    return mask.reshape(weight.shape)


def _quantize_block(model, in_block, stats, quantizer: Quantizer, schemes, report: QuantReport,
                    keep=None) -> None:
    torch = require_torch("Quantization")
    groups = _shared_inputs(in_block, stats)
    if quantizer.scales_inputs:
        _awq_block(model, in_block, groups, stats, quantizer, schemes, report)
        return
    for group in groups:
        hessian = _hessian_of(stats[group[0][0]])
        # layers of one scheme that share an input quantize as one stacked matrix
        by_scheme: dict = {}
        for name, module in group:
            by_scheme.setdefault(schemes[name], []).append((name, module))
        for scheme, members in by_scheme.items():
            worker = _for_scheme(quantizer, scheme)
            stacked = torch.cat([m.weight.detach() for _, m in members], dim=0)
            mask = None if keep is None else torch.cat([outlier_mask(m.weight, *keep, hessian=hessian)
                                                        for _, m in members], dim=0)  # each layer its own share
            if isinstance(worker, GPTQ):
                q, _ = worker.quantize_with_losses(stacked, hessian, mask)
            else:
                q = worker.quantize(stacked, hessian=hessian, keep=mask)
            lo = 0
            for name, module in members:
                rows = module.weight.shape[0]
                _apply(module, name, q.rows(lo, lo + rows), hessian, report)
                lo += rows


def _awq_block(model, in_block, groups, stats, awq: AWQ, schemes, report: QuantReport) -> None:
    """AWQ on one block: a scale per group of layers sharing an input, folded before them, then
    round to nearest (see the module docstring)."""
    torch = require_torch("Quantization")
    from salience.models.lm import decoder_layers

    attention_norm, mlp_norm, offset = block_layout(model)
    block = decoder_layers(model)[_block_index(in_block[0][0])]
    by_name = dict(in_block)
    short = {name.rsplit(".", 1)[-1]: name for name in by_name}
    hessians = {name: _hessian_of(stats[name]) for name in by_name}

    def fold_into_norm(norm, s):
        with torch.no_grad():
            if offset:  # the norm multiplies by (1 + w): (1 + w) / s = 1 + w'
                norm.weight.copy_((1.0 + norm.weight.double()) / s - 1.0)
            else:
                norm.weight.copy_(norm.weight.double() / s)

    def scale_columns(names, s):
        with torch.no_grad():
            for n in names:
                by_name[n].weight.mul_(s[None, :].to(by_name[n].weight.dtype))

    for group in groups:
        names = [n for n, _ in group]
        kinds = {n.rsplit(".", 1)[-1] for n in names}
        norm = None
        if kinds & {"q_proj", "k_proj", "v_proj"}:
            norm = getattr(block, attention_norm)
        elif kinds & {"gate_proj", "up_proj"}:
            norm = getattr(block, mlp_norm)
        previous = short.get("up_proj") if kinds == {"down_proj"} else None
        if norm is None and previous is None:
            continue  # no operation to fold a scale into (o_proj after grouped attention): plain rounding
        s, _ = _for_scheme(awq, schemes[names[0]]).search_scale([by_name[n].weight.detach().double() for n in names],
                                                                hessians[names[0]])
        if norm is not None:
            fold_into_norm(norm, s)
        else:
            with torch.no_grad():
                by_name[previous].weight.div_(s[:, None].to(by_name[previous].weight.dtype))
        scale_columns(names, s)
        for n in names:  # the layer now sees inputs divided by s: its Hessian follows
            hessians[n] = hessians[n] / s[:, None] / s[None, :]
    for name, module in in_block:  # the output error is the scaled layer's, on its scaled inputs
        _apply(module, name, quantize_rtn(module.weight.detach(), schemes[name]), hessians[name], report)
