"""Static embeddings: a table of token vectors (Model2Vec's format of idea, written by
:func:`salience.models.distill.distill`), a text's vector the mean of its tokens' vectors: no
transformer at encoding time, so thousands of documents a second on a CPU where the transformer
encodes tens, and no window: a long document is encoded whole, not truncated.

:class:`StaticEncoder` reads a distilled folder (``static.json``, ``embeddings.npy``, the
tokenizer's files), and every encoder argument that takes a model folder takes one
(``Dense(encoder=DIR)``, ``salience search index --dense --encoder DIR``). Encoding needs only
the ``tokenizers`` package that transformers brings.
"""

from __future__ import annotations

import json
import re
from itertools import chain
from pathlib import Path
from typing import Sequence

import numpy as np

from salience.exceptions import CorruptIndexError, InvalidParameterError
from salience.extras import require

__all__ = ["StaticEncoder", "is_static_folder"]

FORMAT = "salience.static"
FORMAT_VERSION = 1
CONFIG = "static.json"
#: characters Python's ``str.split()`` splits on but BERT's normalizer deletes (control characters)
_BERT_DELETED = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
#: whitespace pieces tokenized in one string, so the tokenizer's threads get a few such strings each
_PIECES_PER_STRING = 2048


def is_static_folder(path) -> bool:
    """Whether ``path`` is a folder written by :func:`distill`."""
    from salience.io.files import folder_format

    return folder_format(path, CONFIG) == FORMAT


def _splits_at_whitespace(tokenizer: dict) -> bool:
    """Whether a text's tokens are the concatenation of its whitespace pieces' tokens (after
    removing ``_BERT_DELETED``): BERT's normalizer and pre-tokenizer, which delete control
    characters, change only single characters and split at Unicode whitespace first."""
    normalizer, pre_tokenizer = tokenizer.get("normalizer") or {}, tokenizer.get("pre_tokenizer") or {}
    return (normalizer.get("type") == "BertNormalizer" and normalizer.get("clean_text") is True
            and pre_tokenizer.get("type") == "BertPreTokenizer")


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
        self._by_pieces = False

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
                "_tokenizer": None, "_by_pieces": False}

    def _load(self):
        if self._table is None:
            tokenizers = require("tokenizers", "embed", "Static embeddings")
            try:
                self._tokenizer = tokenizers.Tokenizer.from_file(str(self.path / "tokenizer.json"))
                table = np.load(self.path / "embeddings.npy", mmap_mode="r")
            except Exception as err:  # noqa: BLE001 - file errors, and the tokenizers library's own
                raise CorruptIndexError(f"{self.path}: cannot read the static encoder ({err}).") from None
            self._tokenizer.no_truncation()
            self._tokenizer.no_padding()
            if table.ndim != 2 or table.shape[1] != self.dimension:
                raise CorruptIndexError(f"{self.path / 'embeddings.npy'}: shape {table.shape}, the config says "
                                        f"{self.dimension} dimensions.")
            self._table = np.ascontiguousarray(table)
            self._known = np.abs(self._table).sum(axis=1) > 0  # special and unused tokens count for nothing
            self._by_pieces = _splits_at_whitespace(json.loads(self._tokenizer.to_str()))
        return self._tokenizer, self._table

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return self.encode(texts)

    def encode(self, texts: Sequence[str], *, progress=None, batch_size: int = 8192) -> np.ndarray:
        """One unit-length float32 row per text (zeros for a text with no known token)."""
        tokenizer, table = self._load()
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InvalidParameterError(f"text {i} must be a str; got {type(text).__name__}.")
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        count = self._count_by_pieces if self._by_pieces else self._count_whole
        for lo in range(0, len(texts), batch_size):
            chunk = texts[lo : lo + batch_size]
            summed = np.asarray(count(chunk) @ table, dtype=np.float32)
            norms = np.linalg.norm(summed, axis=1, keepdims=True)
            out[lo : lo + len(chunk)] = summed / np.where(norms > 0, norms, 1.0)
            if progress is not None:
                progress.update(len(chunk))
        return out

    def _token_matrix(self, flat: np.ndarray, indptr: np.ndarray):
        """Rows x vocabulary counts of known tokens, row i's tokens ``flat[indptr[i]:indptr[i + 1]]``."""
        import scipy.sparse as sp

        return sp.csr_matrix((self._known[flat].astype(np.float32), flat, indptr),
                             shape=(len(indptr) - 1, len(self._table)))

    def _count_whole(self, texts: list[str]):
        """Each text through the tokenizer: any tokenizer."""
        ids = [encoding.ids for encoding in self._tokenizer.encode_batch_fast(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        return self._token_matrix(flat, np.concatenate([[0], np.cumsum(lengths)]))

    def _count_by_pieces(self, texts: list[str]):
        """The same counts for a tokenizer that splits at whitespace first (BERT's): a text's
        tokens are its whitespace pieces' tokens, so each distinct piece is tokenized once (a
        tenth of SciFact's 1.1 million pieces) and the texts count their pieces'."""
        import scipy.sparse as sp

        pieces = [_BERT_DELETED.sub("", text).split() for text in texts]
        flat = list(chain.from_iterable(pieces))
        position = {piece: i for i, piece in enumerate(dict.fromkeys(flat))}
        distinct = list(position)
        per_text = sp.csr_matrix(
            (np.ones(len(flat), dtype=np.float32),
             np.fromiter(map(position.__getitem__, flat), dtype=np.int64, count=len(flat)),
             np.concatenate([[0], np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)))])),
            shape=(len(texts), len(distinct)))
        # distinct pieces joined by spaces, a token's piece found from where it starts
        groups = [distinct[lo : lo + _PIECES_PER_STRING] for lo in range(0, len(distinct), _PIECES_PER_STRING)]
        encodings = self._tokenizer.encode_batch([" ".join(group) for group in groups], add_special_tokens=False)
        ids, owners = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for g, (group, encoding) in enumerate(zip(groups, encodings)):
            starts = np.zeros(len(group), dtype=np.int64)
            np.cumsum(np.fromiter(map(len, group), dtype=np.int64, count=len(group))[:-1] + 1, out=starts[1:])
            token_starts = np.fromiter((start for start, _ in encoding.offsets), dtype=np.int64,
                                       count=len(encoding.offsets))
            owners.append(np.searchsorted(starts, token_starts, side="right") - 1 + g * _PIECES_PER_STRING)
            ids.append(np.asarray(encoding.ids, dtype=np.int64))
        indptr = np.concatenate([[0], np.cumsum(np.bincount(np.concatenate(owners), minlength=len(distinct)))])
        per_piece = self._token_matrix(np.concatenate(ids), indptr)
        return per_text @ per_piece
