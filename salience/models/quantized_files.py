"""The quantized model's folder (``pip install 'salience[lm]'``): :func:`save_quantized` writes
``config.json`` with a compressed-tensors ``quantization_config`` and ``model.safetensors``
with ``weight_packed`` (int32, dense bit-packing, codes offset by 2^(b-1)), ``weight_scale``,
``weight_zero_point`` and ``weight_shape`` per layer (``pack-quantized``; 8-bit layers
``int-quantized``: int8 ``weight``), and salience's own additions (8-bit embedding rows;
outliers as ``weight_outlier_index``, int32 positions row x columns + column, and
``weight_outlier_value``, float16, which compressed-tensors readers do not know);
:func:`load_quantized` reads it back into the integer modules of
:mod:`salience.models.quantized`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from salience.exceptions import InvalidParameterError, MissingDependencyError
from salience.models.compressed_folders import is_quantized_folder, prepare_folder, write_folder
from salience.models.quantized import _classes, _set_module, _torch

__all__ = ["save_quantized", "load_quantized", "is_quantized_folder", "prepare_folder", "pack_int32", "unpack_int32"]

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
        if q.outliers is not None:  # salience's own addition: compressed-tensors readers do not know it
            indices, values = q.outliers
            tensors[f"{name}.weight_outlier_index"] = (indices[0] * q.codes.shape[1] + indices[1]).to(torch.int32)
            tensors[f"{name}.weight_outlier_value"] = values.to(torch.float16)
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
                           else None, "outliers": sum(q.outlier_count for q in layers.values()),
                           **(extra or {})}}
    write_folder(model, folder, tensors, config, tokenizer)
    return config


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
            outliers = None
            if f"{name}.weight_outlier_index" in keys:
                flat = f.get_tensor(f"{name}.weight_outlier_index").to(torch.int64)
                outliers = (torch.stack([flat // codes.shape[1], flat % codes.shape[1]]),
                            f.get_tensor(f"{name}.weight_outlier_value").to(torch.float32))
            _set_module(model, name, Linear(codes, scale, zero, bits=bits, group_size=group, bias=bias,
                                            activation_bits=act_bits, outliers=outliers))
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
