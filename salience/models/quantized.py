"""Quantized language models that really are smaller and faster: integer weights in memory and
on disk, integer matrix products on the CPU, and the compressed-tensors folder format
(``pip install 'salience[lm]'``).

* :class:`QuantizedLinear` holds a linear layer's integer codes and scales (no float weight)
  and multiplies with PyTorch's CPU integer kernels: 8-bit weights per output channel by
  ``_weight_int8pack_mm``, 4-bit weights in groups of 32-256 by
  ``_weight_int4pack_mm_for_cpu`` (activations in bfloat16), W8A8 (activations quantized per
  token at run time) by ``_int_mm``; a layout no kernel takes (5-7 bits, grouped 8 bits) keeps
  a bfloat16 working copy made at load (the file stays integer). Prompts of more than :data:`KERNEL_ROWS` rows use the bfloat16 product of the
  dequantized weight (faster there than the integer kernels on this kind of CPU).
* :class:`QuantizedEmbedding`: 8-bit rows (one scale per token), also serving a tied output head.
* :func:`save_quantized` writes ``config.json`` with a compressed-tensors
  ``quantization_config`` and ``model.safetensors`` with ``weight_packed`` (int32, dense
  bit-packing, codes offset by 2^(b-1)), ``weight_scale``, ``weight_zero_point`` and
  ``weight_shape`` per layer (``pack-quantized``; 8-bit layers ``int-quantized``: int8
  ``weight``); :func:`load_quantized` reads it back into integer modules.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np

from salience.exceptions import InvalidParameterError, MissingDependencyError
from salience.extras import require_torch

__all__ = ["to_integer_modules", "save_quantized", "load_quantized",
           "is_quantized_folder", "pack_int32", "unpack_int32", "KERNEL_ROWS", "model_bytes"]

#: rows (tokens) up to which the integer kernels run; above, the dequantized bfloat16 product
KERNEL_ROWS = 16
_INT4_GROUPS = (32, 64, 128, 256)


def _torch():
    return require_torch("Quantized models")


# ------------------------------------------------------------------------------------------
# bit packing (compressed-tensors' layout: element i of a row at bits i*b of the row's words)
def pack_int32(codes, bits: int) -> np.ndarray:
    """Signed codes (rows, cols) in [-2^(b-1), 2^(b-1)) packed densely into int32 words along
    each row, offset by 2^(b-1): ceil(cols x b / 32) words a row."""
    codes = np.asarray(codes)
    rows, cols = codes.shape
    values = (codes.astype(np.int64) + (1 << (bits - 1))).astype(np.uint64)
    words = math.ceil(cols * bits / 32)
    bitpos = np.arange(cols, dtype=np.uint64) * np.uint64(bits)
    out = np.zeros((rows, words + 1), dtype=np.uint64)
    index = (bitpos // 32).astype(np.int64)
    shift = bitpos % np.uint64(32)
    shifted = values << shift[None, :]  # at most 39 bits: the part past 32 belongs to the next word
    np.add.at(out, (slice(None), index), shifted & np.uint64(0xFFFFFFFF))
    np.add.at(out, (slice(None), index + 1), shifted >> np.uint64(32))
    return out[:, :words].astype(np.uint32).view(np.int32)


def unpack_int32(packed, bits: int, cols: int) -> np.ndarray:
    """The signed codes (rows, cols) of :func:`pack_int32`'s words."""
    words = np.asarray(packed).view(np.uint32).astype(np.uint64)
    words = np.concatenate([words, np.zeros((words.shape[0], 1), dtype=np.uint64)], axis=1)
    bitpos = np.arange(cols, dtype=np.uint64) * np.uint64(bits)
    index = (bitpos // 32).astype(np.int64)
    shift = bitpos % np.uint64(32)
    joined = words[:, index] | (words[:, index + 1] << np.uint64(32))
    values = (joined >> shift[None, :]) & np.uint64((1 << bits) - 1)
    return (values.astype(np.int64) - (1 << (bits - 1))).astype(np.int8)


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
                     activation_bits: int | None = None):
            super().__init__()
            self.out_features, self.in_features = codes.shape
            self.bits, self.group_size, self.activation_bits = bits, group_size, activation_bits
            self.register_buffer("codes", codes.to(torch.int8).contiguous())
            self.register_buffer("scale", scale.to(torch.float32).contiguous())
            self.register_buffer("zero", None if zero is None else zero.to(torch.int8).contiguous())
            self.bias = None if bias is None else torch.nn.Parameter(bias.detach().clone(), requires_grad=False)
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
            return weight[:, : self.in_features] if pad else weight

        def forward(self, x):
            shape = x.shape
            flat = x.reshape(-1, self.in_features)
            rows = flat.shape[0]
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
                out = flat.to(torch.bfloat16) @ self._working.T
            else:
                out = flat.to(torch.bfloat16) @ self.dequantized(torch.bfloat16).T
            out = out.to(x.dtype)
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
                                            activation_bits=q.scheme.activation_bits))
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


# ------------------------------------------------------------------------------------------
# the compressed-tensors folder
def _config_groups(layers: dict) -> dict:
    """One config group per distinct scheme, targeting its layers by name."""
    groups: dict = {}
    for name, q in layers.items():
        key = json.dumps(q.scheme.as_dict(), sort_keys=True)
        groups.setdefault(key, (q.scheme, []))[1].append(name)
    out = {}
    for index, (scheme, names) in enumerate(groups.values()):
        fmt = "int-quantized" if scheme.bits == 8 else "pack-quantized"
        out[f"group_{index}"] = {
            "targets": sorted(names),
            "weights": {"num_bits": scheme.bits, "type": "int", "symmetric": scheme.symmetric,
                        "strategy": "channel" if scheme.group_size is None else "group",
                        "group_size": scheme.group_size, "dynamic": False, "actorder": None, "observer": "minmax",
                        "block_structure": None, "observer_kwargs": {}},
            "input_activations": None if scheme.activation_bits is None else {
                "num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True,
                "group_size": None, "actorder": None, "observer": None, "block_structure": None,
                "observer_kwargs": {}},
            "output_activations": None,
            "format": fmt,
        }
    return out


def save_quantized(model, folder, *, tokenizer=None, extra: dict | None = None) -> dict:
    """Write a quantized model to ``folder``: config, safetensors, tokenizer. The folder is
    created when missing; an existing one must be empty or an earlier quantized model (never
    another folder's files overwritten). Returns the quantization_config written."""
    torch = _torch()
    from safetensors.torch import save_file

    folder = prepare_folder(folder)
    layers = {name: m.salience_quantized for name, m in model.named_modules()
              if hasattr(m, "salience_quantized") and isinstance(m, torch.nn.Linear)}
    if not layers:
        raise InvalidParameterError("the model has no quantized layers: quantize it first "
                                    "(salience.compress.quantize).")
    tensors: dict = {}
    skip = set()
    for name, q in layers.items():
        skip.add(f"{name}.weight")
        if q.scheme.bits == 8:
            tensors[f"{name}.weight"] = q.codes.contiguous()
        else:
            tensors[f"{name}.weight_packed"] = torch.from_numpy(pack_int32(q.codes.numpy(), q.scheme.bits))
            tensors[f"{name}.weight_shape"] = torch.tensor(list(q.codes.shape), dtype=torch.int64)
        tensors[f"{name}.weight_scale"] = q.scale.contiguous()
        if q.zero is not None:
            tensors[f"{name}.weight_zero_point"] = q.zero.contiguous()
    embedding_name = None
    embedding = model.get_input_embeddings()
    for name, m in model.named_modules():
        if m is embedding:
            embedding_name = name
    if hasattr(embedding, "salience_quantized"):
        codes, scale = embedding.salience_quantized
        skip.add(f"{embedding_name}.weight")
        tensors[f"{embedding_name}.weight_int8"] = codes.contiguous()
        tensors[f"{embedding_name}.weight_scale"] = scale.contiguous()
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    state = model.state_dict()
    seen_storage = {}
    for key, value in state.items():
        if key in skip or key in tensors:
            continue
        if tied and key.endswith("lm_head.weight"):
            continue
        ptr = value.untyped_storage().data_ptr()
        if ptr in seen_storage:  # shared tensors are saved once
            continue
        seen_storage[ptr] = key
        tensors[key] = value.detach().contiguous().clone()
    config = {"config_groups": _config_groups(layers), "format": "mixed-precision" if len(
        {q.scheme.bits == 8 for q in layers.values()}) > 1 else ("int-quantized" if next(iter(layers.values())).scheme.bits == 8
                                                                 else "pack-quantized"),
              "ignore": ["lm_head"], "quant_method": "compressed-tensors", "quantization_status": "compressed",
              "kv_cache_scheme": None, "global_compression_ratio": None, "version": "0.19.0",
              "salience": {"embeddings": "int8" if embedding_name and f"{embedding_name}.weight_int8" in tensors
                           else None, **(extra or {})}}
    model.config.quantization_config = config
    try:
        model.config.save_pretrained(folder)
    finally:
        del model.config.quantization_config
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(folder)
    return config


def prepare_folder(folder) -> Path:
    """``folder`` created when missing; an existing one must be empty or an earlier compressed
    model (never another folder's files overwritten)."""
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or (any(folder.iterdir()) and not is_quantized_folder(folder))):
        raise InvalidParameterError(f"{folder} exists and is not an earlier compressed model: refusing to write "
                                    "into it (give a new or empty folder).")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def is_quantized_folder(path) -> bool:
    """A folder whose config.json carries a compressed-tensors quantization_config."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return False
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (data.get("quantization_config") or {}).get("quant_method") == "compressed-tensors"


def load_quantized(path, *, dtype: str = "float32"):
    """(model, tokenizer) of a folder written by :func:`save_quantized`, its layers the
    integer modules (the float weights never materialised). ``dtype``: of the activations and
    the remaining float weights (norms, unquantized embeddings): ``"float32"`` or
    ``"bfloat16"`` (the integer kernels take bfloat16 inputs: no conversion at every layer, and
    half the bytes of a float head)."""
    torch = _torch()
    from salience.extras import require
    transformers = require("transformers", "lm", "Loading a quantized language model")
    try:
        from safetensors import safe_open
    except ImportError:
        raise MissingDependencyError("reading a quantized folder needs safetensors: pip install 'salience[lm]'") \
            from None
    if dtype not in ("float32", "bfloat16"):
        raise InvalidParameterError(f"dtype must be 'float32' or 'bfloat16'; got {dtype!r}.")
    path = Path(path)
    config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    qconfig = config.quantization_config
    qconfig = qconfig if isinstance(qconfig, dict) else qconfig.to_dict()
    del config.quantization_config
    Linear, Embedding = _classes()
    tensors_path = path / "model.safetensors"
    if not tensors_path.is_file():
        raise InvalidParameterError(f"{path} holds no model.safetensors: not a quantized model folder.")
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    schemes = {}
    for group in qconfig.get("config_groups", {}).values():
        w = group["weights"]
        act = group.get("input_activations")
        for target in group["targets"]:
            schemes[target] = (w["num_bits"], w.get("group_size") if w.get("strategy") == "group" else None,
                               None if not act else act["num_bits"])
    try:
        handle = safe_open(str(tensors_path), framework="pt")
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error types for damaged files
        raise InvalidParameterError(f"{tensors_path} is not a readable safetensors file: {err}") from None
    with handle as f:
        keys = set(f.keys())
        plain = {}
        for name, (bits, group, act_bits) in schemes.items():
            if f"{name}.weight_scale" not in keys:
                raise InvalidParameterError(f"{tensors_path} has no scales for {name}: the folder is damaged.")
            scale = f.get_tensor(f"{name}.weight_scale")
            zero = f.get_tensor(f"{name}.weight_zero_point") if f"{name}.weight_zero_point" in keys else None
            if f"{name}.weight_packed" in keys:
                rows, cols = f.get_tensor(f"{name}.weight_shape").tolist()
                codes = torch.from_numpy(unpack_int32(f.get_tensor(f"{name}.weight_packed").numpy(), bits, cols))
            else:
                codes = f.get_tensor(f"{name}.weight")
            bias = f.get_tensor(f"{name}.bias") if f"{name}.bias" in keys else None
            _set_module(model, name, Linear(codes, scale, zero, bits=bits, group_size=group, bias=bias,
                                            activation_bits=act_bits))
        used = {k for k in keys if k.rsplit(".", 1)[0] in schemes or any(
            k.startswith(f"{n}.") for n in schemes)}
        for name in (qconfig.get("sparsity_config") or {}).get("targets", []):
            from salience.models.sparse_files import decompress_sparse

            stored = [k for k in keys if k.startswith(f"{name}.weight.")]
            if not stored:
                raise InvalidParameterError(f"{tensors_path} has no compressed weight for {name}: the folder is "
                                            "damaged.")
            parts = {k.rsplit(".", 1)[-1]: f.get_tensor(k).numpy() for k in stored}
            plain[f"{name}.weight"] = torch.from_numpy(decompress_sparse(parts))
            used |= set(stored)
        embedding_names = [k[: -len(".weight_int8")] for k in keys if k.endswith(".weight_int8")]
        for name in embedding_names:
            module = model.get_submodule(name)
            new = Embedding(f.get_tensor(f"{name}.weight_int8"), f.get_tensor(f"{name}.weight_scale"),
                            getattr(module, "padding_idx", None), _embed_scale(config, module))
            _set_module(model, name, new)
            used |= {f"{name}.weight_int8", f"{name}.weight_scale"}
        for key in keys - used:
            plain[key] = f.get_tensor(key)
    model.load_state_dict(plain, strict=False, assign=True)  # the integer modules' buffers are in place already
    tied = bool(getattr(config, "tie_word_embeddings", False))
    if tied:
        embedding = model.get_input_embeddings()
        if embedding_names:
            model.set_output_embeddings(embedding.as_head())
        else:
            model.tie_weights()
    _rebuild_unsaved_buffers(model)
    if dtype == "bfloat16":
        for module in model.modules():
            if isinstance(module, Embedding):
                module.dtype = torch.bfloat16
            for name, p in list(module.named_parameters(recurse=False)):
                if p.is_floating_point():
                    setattr(module, name, torch.nn.Parameter(p.detach().to(torch.bfloat16), requires_grad=False))
        if tied and not embedding_names:
            model.tie_weights()
        model.config.torch_dtype = torch.bfloat16
    meta = [n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta]
    if meta:
        raise InvalidParameterError(f"{tensors_path} lacks tensors for {sorted(meta)[:5]}: the folder is damaged or "
                                    "of another model.")
    tokenizer = None
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError):
        pass
    return model.eval(), tokenizer


def _embed_scale(config, module):
    """The factor a scaled embedding (Gemma's: sqrt(hidden size)) multiplies by, or None. It
    is a buffer that is not saved: on a model built on the meta device it is recomputed."""
    scale = getattr(module, "embed_scale", None)
    if scale is None:
        return None
    if getattr(scale, "is_meta", False):
        return _torch().tensor(float(config.get_text_config().hidden_size) ** 0.5)
    return scale


def _rebuild_unsaved_buffers(model) -> None:
    """The buffers that are not saved (rotary embeddings' inverse frequencies, Gemma's
    embedding scale): built on the meta device, they are recomputed here on the CPU."""
    torch = _torch()
    for name, module in model.named_modules():
        if isinstance(getattr(module, "embed_scale", None), torch.Tensor) and module.embed_scale.is_meta:
            module.register_buffer("embed_scale", _embed_scale(model.config, module), persistent=False)
            continue
        if any(buffer.is_meta for buffer in module.buffers(recurse=False)):
            fresh = type(module)(config=module.config) if hasattr(module, "config") else None
            if fresh is None:
                missing = [n for n, b in module.named_buffers(recurse=False) if b.is_meta]
                raise InvalidParameterError(f"cannot rebuild {name or 'the model'}'s unsaved buffers ({', '.join(missing)}).")
            for buffer_name, buffer in fresh.named_buffers(recurse=False):
                module.register_buffer(buffer_name, buffer, persistent=False)
            for attribute, value in vars(fresh).items():  # attention_scaling and its per-layer-type kin
                if not attribute.startswith("_") and attribute != "training" and isinstance(value, (int, float)):
                    setattr(module, attribute, value)
            del fresh
    for p in model.parameters():
        p.requires_grad_(False)
    torch.set_grad_enabled(torch.is_grad_enabled())
