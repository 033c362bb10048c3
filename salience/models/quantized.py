"""Quantized language models that really are smaller and faster: integer weights in memory and
integer matrix products on the CPU (``pip install 'salience[lm]'``); the folder format is
:mod:`salience.models.quantized_files`.

* :class:`QuantizedLinear` holds a linear layer's integer codes and scales (no float weight)
  and multiplies with PyTorch's CPU integer kernels: 8-bit weights per output channel by
  ``_weight_int8pack_mm``, 4-bit weights in groups of 32-256 by
  ``_weight_int4pack_mm_for_cpu`` (activations in bfloat16), W8A8 (activations quantized per
  token at run time) by ``_int_mm``; a layout no kernel takes (5-7 bits, grouped 8 bits) keeps
  a bfloat16 working copy made at load (the file stays integer). Prompts of more than :data:`KERNEL_ROWS` rows use the bfloat16 product of the
  dequantized weight (faster there than the integer kernels on this kind of CPU).
* :class:`QuantizedEmbedding`: 8-bit rows (one scale per token), also serving a tied output head.
* Outliers (weights kept in float16 by outlier-aware quantization) are a sparse matrix added
  to the integer product.
"""

from __future__ import annotations

import functools

from salience.extras import require_torch

__all__ = ["to_integer_modules", "quantize_embeddings", "KERNEL_ROWS", "model_bytes"]

#: rows (tokens) up to which the integer kernels run; above, the dequantized bfloat16 product
KERNEL_ROWS = 16
_INT4_GROUPS = (32, 64, 128, 256)


def _torch():
    return require_torch("Quantized models")


# ------------------------------------------------------------------------------------------
# modules
@functools.lru_cache(maxsize=None)
def _classes():
    """The module classes, defined once torch is importable."""
    torch = _torch()

    class QuantizedLinear(torch.nn.Module):
        """A linear layer of integer codes (see the module docstring). ``codes`` int8 (out,
        in); ``scale`` (out, groups); ``zero`` (out, groups) int8 or None; ``group_size`` None
        for one scale per row; ``activation_bits`` 8 for W8A8."""

        def __init__(self, codes, scale, zero, *, bits: int, group_size: int | None, bias=None,
                     activation_bits: int | None = None, outliers=None):
            super().__init__()
            self.out_features, self.in_features = codes.shape
            self.bits, self.group_size, self.activation_bits = bits, group_size, activation_bits
            self.register_buffer("codes", codes.to(torch.int8).contiguous())
            self.register_buffer("scale", scale.to(torch.float32).contiguous())
            self.register_buffer("zero", None if zero is None else zero.to(torch.int8).contiguous())
            self.bias = None if bias is None else torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
            # outliers kept in float16 (outlier-aware quantization): a sparse matrix added to the product
            self._outliers = None
            if outliers is not None and outliers[1].numel():
                indices, values = outliers
                self.register_buffer("outlier_index", (indices[0] * self.in_features + indices[1]).to(torch.int32))
                self.register_buffer("outlier_value", values.to(torch.float16))
                self._outliers = torch.sparse_coo_tensor(indices.to(torch.int64), values.to(torch.float32), check_invariants=True,
                                                         size=(self.out_features, self.in_features)).coalesce()
            self._kernel = self._prepare_kernel()

        def extra_repr(self) -> str:
            return (f"in_features={self.in_features}, out_features={self.out_features}, bits={self.bits}, "
                    f"group_size={self.group_size}, kernel={self._kernel}")

        def _prepare_kernel(self) -> str:
            g = self.group_size
            self._pad = 0
            if self.bits == 8 and g is None and self.zero is None:
                self._scale_bf16 = self.scale[:, 0].to(torch.bfloat16).contiguous()
                return "int8"
            if self.bits <= 4 and g in _INT4_GROUPS and self.out_features % 32 == 0:
                # a ragged last group is padded with zero columns (the input is padded with zeros too)
                self._pad = -self.in_features % g
                unsigned = torch.nn.functional.pad(self.codes.to(torch.int32), (0, self._pad)) + 8
                self._packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(unsigned.contiguous(), 2)
                zero = torch.zeros_like(self.scale) if self.zero is None else self.zero.to(torch.float32)
                kernel_zero = -zero * self.scale  # w = (u - 8) s + z'  with  w = (c - zero) s,  u = c + 8
                self._scales_zeros = torch.stack([self.scale, kernel_zero], dim=-1).transpose(0, 1).contiguous() \
                    .to(torch.bfloat16)
                return "int4"
            # no integer kernel takes this layout (5-7 bits, 8 bits in groups, a row count the
            # int4 kernel refuses): a bfloat16 working copy, made once, instead of a
            # dequantization at every token
            self._working = self.dequantized(torch.bfloat16)
            return "bfloat16 copy"

        def dequantized(self, dtype):
            """The float weight, computed group by group (a broadcast, no gather)."""
            g = self.group_size or self.in_features
            pad = -self.in_features % g
            codes = self.codes.to(dtype)
            if pad:
                codes = torch.nn.functional.pad(codes, (0, pad))
            codes = codes.view(self.out_features, -1, g)
            if self.zero is not None:
                codes = codes - self.zero.to(dtype)[:, :, None]
            weight = (codes * self.scale.to(dtype)[:, :, None]).view(self.out_features, -1)
            weight = weight[:, : self.in_features] if pad else weight
            if self._outliers is not None:
                weight = weight + self._outliers.to_dense().to(dtype)
            return weight

        def forward(self, x):
            shape = x.shape
            flat = x.reshape(-1, self.in_features)
            rows = flat.shape[0]
            grid_only = True  # the integer kernels multiply by the grid; the outliers are added after
            if self.activation_bits == 8 and rows > KERNEL_ROWS:
                out = self._w8a8(flat)
            elif rows <= KERNEL_ROWS and self._kernel == "int8":
                out = torch.ops.aten._weight_int8pack_mm(flat.to(torch.bfloat16).contiguous(), self.codes,
                                                         self._scale_bf16)
            elif rows <= KERNEL_ROWS and self._kernel == "int4":
                rows_in = flat.to(torch.bfloat16)
                if self._pad:
                    rows_in = torch.nn.functional.pad(rows_in, (0, self._pad))
                out = torch.ops.aten._weight_int4pack_mm_for_cpu(rows_in.contiguous(), self._packed, self.group_size,
                                                                 self._scales_zeros)
            elif self._kernel == "bfloat16 copy":
                out, grid_only = flat.to(torch.bfloat16) @ self._working.T, False
            else:
                out, grid_only = flat.to(torch.bfloat16) @ self.dequantized(torch.bfloat16).T, False
            out = out.to(x.dtype)
            if self._outliers is not None and grid_only:
                out = out + torch.sparse.mm(self._outliers, flat.to(torch.float32).T).T.to(x.dtype)
            if self.bias is not None:
                out = out + self.bias
            return out.reshape(*shape[:-1], self.out_features)

        def _w8a8(self, flat):
            # activations to int8 per token (symmetric), one integer product, both scales after
            x_scale = flat.abs().amax(dim=1, keepdim=True).clamp(min=1e-8) / 127.0
            xq = torch.clamp(torch.round(flat / x_scale), -127, 127).to(torch.int8)
            acc = torch._int_mm(xq, self.codes.T)
            return acc.to(torch.float32) * x_scale * self.scale[:, 0][None, :]

    class QuantizedEmbedding(torch.nn.Module):
        """Token embeddings as 8-bit rows with one scale per token; ``as_head()`` gives the
        tied output head on the same storage (an int8 product, one scale per vocabulary row)."""

        def __init__(self, codes, scale, padding_idx=None, embed_scale=None):
            super().__init__()
            self.num_embeddings, self.embedding_dim = codes.shape
            self.padding_idx = padding_idx
            self.register_buffer("codes", codes.to(torch.int8).contiguous())
            self.register_buffer("scale", scale.reshape(-1, 1).to(torch.float32).contiguous())
            # Gemma's embeddings multiply by sqrt(hidden size) on the way in (not in the tied head)
            self.register_buffer("embed_scale", None if embed_scale is None else
                                 torch.as_tensor(embed_scale, dtype=torch.float32).detach().clone(), persistent=False)
            self.dtype = torch.float32  # of the vectors it returns (load_quantized's dtype)

        @property
        def weight(self):  # transformers reads embeddings' dtype and device through .weight
            return self.scale

        def forward(self, ids):
            vectors = (self.codes[ids].to(torch.float32) * self.scale[ids]).to(self.dtype)
            return vectors if self.embed_scale is None else vectors * self.embed_scale.to(self.dtype)

        def as_head(self):
            return _TiedHead(self)

    class _TiedHead(torch.nn.Module):
        def __init__(self, embedding):
            super().__init__()
            self.embedding = [embedding]  # not a submodule: its buffers are saved once, as the embedding's
            self.in_features, self.out_features = embedding.embedding_dim, embedding.num_embeddings
            self._scale_bf16 = embedding.scale[:, 0].to(torch.bfloat16).contiguous()

        def forward(self, x):
            e = self.embedding[0]
            flat = x.reshape(-1, self.in_features)
            if flat.shape[0] <= KERNEL_ROWS:
                out = torch.ops.aten._weight_int8pack_mm(flat.to(torch.bfloat16).contiguous(), e.codes,
                                                         self._scale_bf16)
            else:
                out = flat.to(torch.bfloat16) @ (e.codes.to(torch.bfloat16) * e.scale.to(torch.bfloat16)).T
            return out.to(x.dtype).reshape(*x.shape[:-1], self.out_features)

    for cls in (QuantizedLinear, QuantizedEmbedding, _TiedHead):
        cls.__qualname__ = cls.__name__
    return QuantizedLinear, QuantizedEmbedding


def __getattr__(name):
    if name in ("QuantizedLinear", "QuantizedEmbedding"):
        linear, embedding = _classes()
        return linear if name == "QuantizedLinear" else embedding
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ------------------------------------------------------------------------------------------
# a model's quantized layers: float modules carry ``salience_quantized`` after quantize()
def _set_module(model, name: str, module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, module)


def quantize_embeddings(model) -> None:
    """Mark the input embeddings (and so a tied output head) for 8-bit rows."""
    torch = _torch()
    embedding = model.get_input_embeddings()
    w = embedding.weight.detach().to(torch.float32)
    scale = torch.clamp(w.abs().amax(dim=1) / 127.0, min=torch.finfo(torch.float32).eps)
    codes = torch.clamp(torch.round(w / scale[:, None]), -127, 127).to(torch.int8)
    embedding.salience_quantized = (codes, scale)
    with torch.no_grad():
        embedding.weight.copy_(codes.to(torch.float32) * scale[:, None])


def to_integer_modules(model):
    """Replace every float layer that :func:`~salience.compress.quantize` marked by its integer
    module (in place; returns the model)."""
    torch = _torch()
    Linear, Embedding = _classes()
    head = model.get_output_embeddings()
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    for name, module in list(model.named_modules()):
        q = getattr(module, "salience_quantized", None)
        if q is None:
            continue
        if isinstance(module, torch.nn.Embedding):
            codes, scale = q
            new = Embedding(codes, scale, module.padding_idx, getattr(module, "embed_scale", None))
            _set_module(model, name, new)
            if tied and head is not None:
                model.set_output_embeddings(new.as_head())
        else:
            _set_module(model, name, Linear(q.codes, q.scale, q.zero, bits=q.scheme.bits,
                                            group_size=q.scheme.group_size, bias=module.bias,
                                            activation_bits=q.scheme.activation_bits, outliers=q.outliers))
    return model


def model_bytes(model) -> int:
    """Bytes of the model's parameters and buffers in memory (shared storage counted once)."""
    seen, total = set(), 0
    for tensor in list(model.parameters()) + list(model.buffers()):
        key = tensor.untyped_storage().data_ptr()
        if key not in seen:
            seen.add(key)
            total += tensor.untyped_storage().nbytes()
    return total
