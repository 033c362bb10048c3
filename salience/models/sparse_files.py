"""Pruned models saved at their true size: the zeros of a sparse linear layer are not written.

Two layouts, after compressed-tensors' sparse formats (a ``sparsity_config`` in the
``quantization_config`` of ``config.json``):

* ``sparse-bitmask`` (any pattern): per layer ``weight.bitmask`` (uint8, one bit per weight,
  row by row, least significant bit first), ``weight.compressed`` (the nonzero values in row
  order, the model's dtype), ``weight.row_offsets`` (int64: where each row's values start)
  and ``weight.shape``;
* ``sparse-24-bitmask`` (2:4): ``weight.compressed`` holds exactly two values of every four
  (rows, cols / 2) beside the same bitmask.

:func:`save_sparse` writes them (bytes: values plus 1 bit a weight, so 50% unstructured
sparsity in float32 is 53% of dense, 2:4 the same with no offsets); loading
(:func:`salience.models.quantized_files.load_quantized` reads any compressed-tensors folder written
here) decompresses each layer into an ordinary dense weight: PyTorch's CPU kernels gain
nothing from 50% sparsity, the saving is on disk and in transfer.
"""

from __future__ import annotations

import numpy as np

from salience.exceptions import InvalidParameterError
from salience.extras import require_torch

__all__ = ["save_sparse", "decompress_sparse", "compress_sparse"]


def compress_sparse(weight: np.ndarray, structure: str) -> dict[str, np.ndarray]:
    """The stored tensors of one (rows, cols) weight in ``structure`` ("unstructured" or "2:4")."""
    w = np.asarray(weight)
    rows, cols = w.shape
    mask = w != 0
    if structure == "2:4":
        if cols % 4 or (mask.reshape(rows, -1, 4).sum(-1) > 2).any():
            raise InvalidParameterError("the weight is not 2:4 sparse (more than two nonzeros in a group of four).")
        # exactly two slots of every four: the nonzeros, then zeros of the group to make up two
        keep = mask.reshape(rows, -1, 4).copy()
        short = 2 - keep.sum(-1)
        for need in (1, 2):
            r, g = np.nonzero(short >= need)
            for slot in range(4):
                free = ~keep[r, g, slot] & (short[r, g] >= need)
                keep[r[free], g[free], slot] = True
                short[r[free], g[free]] -= 1
        keep = keep.reshape(rows, cols)
        return {"compressed": w[keep].reshape(rows, cols // 2), "bitmask": np.packbits(keep, axis=1,
                                                                                       bitorder="little"),
                "shape": np.array([rows, cols], dtype=np.int64)}
    counts = mask.sum(1)
    return {"compressed": w[mask], "bitmask": np.packbits(mask, axis=1, bitorder="little"),
            "row_offsets": np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64),
            "shape": np.array([rows, cols], dtype=np.int64)}


def decompress_sparse(tensors: dict[str, np.ndarray]) -> np.ndarray:
    """The dense weight of :func:`compress_sparse`'s tensors."""
    rows, cols = (int(v) for v in tensors["shape"])
    mask = np.unpackbits(tensors["bitmask"], axis=1, count=cols, bitorder="little").astype(bool)
    values = np.asarray(tensors["compressed"])
    if mask.sum() != values.size:
        raise InvalidParameterError(f"a sparse layer's bitmask marks {int(mask.sum())} weights but holds "
                                    f"{values.size} values: the file is damaged.")
    out = np.zeros((rows, cols), dtype=values.dtype)
    out[mask] = values.ravel()
    return out


def save_sparse(model, folder, *, tokenizer=None, structure: str = "unstructured", layers=None) -> dict:
    """Write a pruned model with its decoder's linear layers compressed (see the module
    docstring) into ``folder`` (created when missing; never another folder's files
    overwritten). Returns the sparsity_config written."""
    torch = require_torch("Saving a sparse model")
    from salience.models.compressed_folders import prepare_folder, write_folder

    if structure not in ("unstructured", "2:4"):
        raise InvalidParameterError(f"structure must be 'unstructured' or '2:4'; got {structure!r}.")
    folder = prepare_folder(folder)
    if layers is None:
        layers = [(name, m) for name, m in model.named_modules()
                  if isinstance(m, torch.nn.Linear) and ".layers." in f".{name}" and "lm_head" not in name]
    tensors, zeros, total = {}, 0, 0
    names = {f"{name}.weight" for name, _ in layers}
    for name, module in layers:
        w = module.weight.detach().numpy()
        for key, value in compress_sparse(w, structure).items():
            tensors[f"{name}.weight.{key}"] = torch.from_numpy(np.ascontiguousarray(value))
        zeros += int((w == 0).sum())
        total += w.size
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    seen = set()
    for key, value in model.state_dict().items():
        if key in names or (tied and key.endswith("lm_head.weight")):
            continue
        ptr = value.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        tensors[key] = value.detach().contiguous().clone()
    sparsity = {"format": "sparse-24-bitmask" if structure == "2:4" else "sparse-bitmask",
                "global_sparsity": zeros / total if total else 0.0, "sparsity_structure": structure,
                "targets": sorted(name for name, _ in layers), "ignore": ["lm_head"]}
    write_folder(model, folder, tensors, {"quant_method": "compressed-tensors", "format": "dense",
                                          "quantization_status": "compressed", "config_groups": {},
                                          "sparsity_config": sparsity, "version": "0.19.0"}, tokenizer)
    return sparsity
