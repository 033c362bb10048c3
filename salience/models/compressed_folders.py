"""Folders in compressed-tensors' layout (a ``quantization_config`` in ``config.json`` beside
``model.safetensors``), shared by the quantized and the sparse writers: made ready without
overwriting another folder's files, written, and recognised."""

from __future__ import annotations

import json
from pathlib import Path

from salience.exceptions import InvalidParameterError

__all__ = ["write_folder", "prepare_folder", "is_quantized_folder"]


def write_folder(model, folder: Path, tensors: dict, quantization_config: dict, tokenizer=None) -> None:
    """The config (with ``quantization_config``), ``model.safetensors``, the tokenizer and the
    generation config, into a folder :func:`prepare_folder` made ready."""
    from safetensors.torch import save_file

    model.config.quantization_config = quantization_config
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
