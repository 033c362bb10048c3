"""Integer grids for weights: schemes (bits, group size, symmetry), min-max quantization
parameters, rounding to the grid and back, and the :class:`QuantizedWeight` a quantizer
returns (integer codes, scales, zero points).

The grid follows compressed-tensors (what llm-compressor writes and vLLM reads), so a folder
saved here loads there: codes are signed integers in ``[-2^(b-1), 2^(b-1) - 1]``; symmetric
scales are ``max|w| / ((qmax - qmin) / 2)`` with zero point 0; asymmetric scales are
``(max - min) / (qmax - qmin)`` over a range widened to hold 0, zero point
``round(qmin - min / scale)``; a value is ``(code - zero) x scale``. Groups are consecutive
input columns of a row; a layer whose width a group does not divide is refused unless
``ragged=True`` (then its last group is shorter, as compressed-tensors allows).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from salience.extras import require_torch
from salience.exceptions import InvalidParameterError, unknown_choice

__all__ = ["QuantScheme", "SCHEMES", "scheme_of", "QuantizedWeight", "minmax_params", "round_to_grid", "quantize_rtn",
           "group_count", "check_groups"]


@dataclass(frozen=True)
class QuantScheme:
    """How weights are stored: ``bits`` (2-8), ``group_size`` (columns sharing a scale; None:
    one scale per output row), ``symmetric``, and ``activation_bits`` (8: activations quantized
    per token at run time, dynamic W8A8; None: activations stay in floating point)."""

    bits: int = 4
    group_size: int | None = 128
    symmetric: bool = True
    activation_bits: int | None = None

    def __post_init__(self):
        if not isinstance(self.bits, int) or not 2 <= self.bits <= 8:
            raise InvalidParameterError(f"weight bits must be an integer from 2 to 8; got {self.bits!r}.")
        if self.group_size is not None and (not isinstance(self.group_size, int) or self.group_size < 2):
            raise InvalidParameterError(f"group size must be an integer >= 2 or None (one scale per row); got "
                                        f"{self.group_size!r}.")
        if self.activation_bits not in (None, 8):
            raise InvalidParameterError(f"activation bits are 8 (dynamic, per token) or None; got "
                                        f"{self.activation_bits!r}.")
        if self.activation_bits is not None and self.bits != 8:
            raise InvalidParameterError("int8 activations pair with 8-bit weights (w8a8) only.")

    @property
    def qmin(self) -> int:
        return -(1 << (self.bits - 1))

    @property
    def qmax(self) -> int:
        return (1 << (self.bits - 1)) - 1

    @property
    def name(self) -> str:
        group = "" if self.group_size is None else f"-g{self.group_size}"
        return f"w{self.bits}a{self.activation_bits or 16}{'' if self.symmetric else '-asym'}{group}"

    def as_dict(self) -> dict:
        return {"bits": self.bits, "group_size": self.group_size, "symmetric": self.symmetric,
                "activation_bits": self.activation_bits}


#: the schemes by name: llm-compressor's presets (W4A16, W3A16 and W8A16 symmetric in groups of
#: 128, W8A8 8-bit per output channel with activations per token) and ``w8a16_channel``, 8-bit
#: per output channel (torchao's int8 weight-only; the int8 kernel's layout)
SCHEMES = {
    "w4a16": QuantScheme(4, 128, True),
    "w4a16_asym": QuantScheme(4, 128, False),
    "w3a16": QuantScheme(3, 128, True),
    "w8a16": QuantScheme(8, 128, True),
    "w8a16_channel": QuantScheme(8, None, True),
    "w8a8": QuantScheme(8, None, True, 8),
}

_UNSET: Any = object()


def scheme_of(scheme: str | QuantScheme | dict = "w4a16", *, group_size: int | None = _UNSET,
              symmetric: bool | None = None) -> QuantScheme:
    """A scheme by name (:data:`SCHEMES`), as given, or from its fields; ``group_size`` and
    ``symmetric`` override the preset's."""
    if isinstance(scheme, str):
        if scheme not in SCHEMES:
            raise unknown_choice("quantization scheme", scheme, tuple(SCHEMES))
        scheme = SCHEMES[scheme]
    elif isinstance(scheme, dict):
        scheme = QuantScheme(**scheme)
    elif not isinstance(scheme, QuantScheme):
        raise InvalidParameterError(f"a quantization scheme is a name {tuple(SCHEMES)} or a QuantScheme; got "
                                    f"{type(scheme).__name__}.")
    fields = scheme.as_dict()
    if group_size is not _UNSET:
        fields["group_size"] = group_size
    if symmetric is not None:
        fields["symmetric"] = bool(symmetric)
    return QuantScheme(**fields)


def group_count(columns: int, group_size: int | None) -> int:
    return 1 if group_size is None else math.ceil(columns / group_size)


def check_groups(name: str, columns: int, scheme: QuantScheme, ragged: bool) -> None:
    """Refuse a group size that does not divide a layer's width (unless ``ragged``)."""
    g = scheme.group_size
    if g is not None and columns % g and not ragged:
        dividing = [d for d in (32, 64, 128, 256) if columns % d == 0]
        raise InvalidParameterError(
            f"group size {g} does not divide {name}'s {columns} input columns; use a group size that does "
            f"({', '.join(map(str, dividing)) or 'none of 32/64/128/256'}), or ragged groups (the last group of a "
            "row shorter, as compressed-tensors allows; CLI: --ragged-groups).")


@dataclass
class QuantizedWeight:
    """A quantized (out, in) weight: ``codes`` (int8, signed), ``scale`` (float32, (out,
    groups)), ``zero`` (int8, (out, groups); None when symmetric), its ``scheme``, and
    ``outliers``: None, or the weights kept in floating point (outlier-aware quantization) as
    ``(indices, values)``, int64 (2, k) row and column and float32 (k,); their codes hold the
    grid's zero, so the dequantized weight is the grid's plus the outliers."""

    codes: Any
    scale: Any
    zero: Any
    scheme: QuantScheme
    outliers: Any = None

    @property
    def outlier_count(self) -> int:
        return 0 if self.outliers is None else int(self.outliers[1].numel())

    def rows(self, lo: int, hi: int) -> "QuantizedWeight":
        """Rows ``lo .. hi`` (a layer of a stacked matrix), its outliers with them."""
        outliers = None
        if self.outliers is not None:
            indices, values = self.outliers
            inside = (indices[0] >= lo) & (indices[0] < hi)
            shifted = indices[:, inside].clone()
            shifted[0] -= lo
            outliers = (shifted, values[inside])
        return QuantizedWeight(self.codes[lo:hi], self.scale[lo:hi], None if self.zero is None else self.zero[lo:hi],
                               self.scheme, outliers)

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.codes.shape)

    def column_params(self):
        """(scale, zero or None) expanded to one column each: (out, in)."""
        cols = self.codes.shape[1]
        g = self.scheme.group_size or cols
        index = require_torch("Quantization").arange(cols) // g
        return self.scale[:, index], None if self.zero is None else self.zero[:, index]

    def dequantize(self, dtype=None):
        torch = require_torch("Quantization")
        scale, zero = self.column_params()
        codes = self.codes.to(torch.float32)
        if zero is not None:
            codes = codes - zero.to(torch.float32)
        out = codes * scale
        if self.outliers is not None:
            indices, values = self.outliers
            out = out.index_put((indices[0], indices[1]), values.to(out.dtype))
        return out if dtype is None else out.to(dtype)


def minmax_params(w, scheme: QuantScheme):
    """(scale, zero or None) of each row of ``w`` (rows, columns) over all its columns: the
    min-max grid of compressed-tensors (see the module docstring)."""
    torch = require_torch("Quantization")
    w = w.to(torch.float32)
    lo = torch.clamp(w.amin(dim=1), max=0.0)
    hi = torch.clamp(w.amax(dim=1), min=0.0)
    span = float(scheme.qmax - scheme.qmin)
    tiny = torch.finfo(torch.float32).eps
    if scheme.symmetric:
        scale = torch.maximum(-lo, hi) / (span / 2)
        return torch.clamp(scale, min=tiny), None
    scale = torch.clamp((hi - lo) / span, min=tiny)
    zero = torch.clamp(torch.round(scheme.qmin - lo / scale), scheme.qmin, scheme.qmax)
    return scale, zero


def round_to_grid(w, scale, zero, scheme: QuantScheme):
    """(codes, dequantized values) of ``w`` on the grid given by per-element (broadcast)
    ``scale`` and ``zero``."""
    torch = require_torch("Quantization")
    scaled = w / scale
    if zero is not None:
        scaled = scaled + zero
    codes = torch.clamp(torch.round(scaled), scheme.qmin, scheme.qmax)
    values = (codes - zero) * scale if zero is not None else codes * scale
    return codes, values


def group_params(w, scheme: QuantScheme, keep=None):
    """(scale, zero or None), each (out, groups) float32, of a whole matrix by min-max per
    group; the weights marked in ``keep`` (outliers kept in floating point) left out."""
    torch = require_torch("Quantization")
    if keep is not None:
        w = w.masked_fill(keep, 0.0)  # 0 is always on the grid: a kept weight widens no range
    rows, cols = w.shape
    g = scheme.group_size or cols
    scales, zeros = [], []
    for lo in range(0, cols, g):
        s, z = minmax_params(w[:, lo : lo + g], scheme)
        scales.append(s)
        zeros.append(z)
    scale = torch.stack(scales, dim=1)
    zero = None if scheme.symmetric else torch.stack(zeros, dim=1)
    return scale, zero


def pack_result(codes, scale, zero, scheme: QuantScheme) -> QuantizedWeight:
    torch = require_torch("Quantization")
    return QuantizedWeight(codes.to(torch.int8), scale.to(torch.float32),
                           None if zero is None else zero.to(torch.int8), scheme)


def quantize_rtn(w, scheme: QuantScheme, scale=None, zero=None, keep=None) -> QuantizedWeight:
    """Round to nearest on the min-max grid of each group (or on given per-group params);
    the weights marked in ``keep`` (a boolean mask) stay exact, as outliers."""
    torch = require_torch("Quantization")
    w = w.detach().to(torch.float32)
    if scale is None:
        scale, zero = group_params(w, scheme, keep)
    q = QuantizedWeight(torch.zeros(w.shape, dtype=torch.int8), scale, zero, scheme)
    column_scale, column_zero = q.column_params()
    grid = w if keep is None else w.masked_fill(keep, 0.0)
    codes, _ = round_to_grid(grid, column_scale, None if column_zero is None else column_zero.float(), scheme)
    out = pack_result(codes, scale, zero, scheme)
    if keep is not None and bool(keep.any()):
        indices = keep.nonzero().T.contiguous()
        out.outliers = (indices, w[keep].to(torch.float16).to(torch.float32))  # stored in float16
    return out
