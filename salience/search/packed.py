"""Postings stored compactly and read a term at a time (a BM25 segment's format from version 3).

Each term's document numbers are stored as gaps (the first as itself) and its term
frequencies as they are, each term in the narrowest of three widths its values fit:

* gaps: 1, 2 or 4 bytes (``uint8``, ``uint16``, ``uint32``);
* term frequencies: 1 or 2 bytes when every one of the term's frequencies is a whole number
  (``uint8``, ``uint16``), else 4 (``float32``: field weights can make them fractional).

The values of every term of one width are concatenated in term order in one array per width
(``postings_docs_1.npy`` ...), and ``postings_docs_width.npy`` gives each term's width, so a
term's postings are a slice of one memory-mapped array and a cumulative sum: a search reads
the query's terms only, and an index larger than memory needs no decoding at load. Per-term
widths rather than bit packing keep decoding to numpy slices (no per-posting Python), at
about 1.5 bytes a gap and 1 byte a frequency on English text against 4 + 4 uncompressed.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from salience.search.block_bounds import block_bound_files, block_frontiers

__all__ = ["PackedPostings", "pack_block", "PackedWriter", "packed_files"]

WIDTHS = (1, 2, 4)
GAP_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}
TF_TYPES = {1: np.uint8, 2: np.uint16, 4: np.float32}
KINDS = {"docs": GAP_TYPES, "tf": TF_TYPES}


def packed_files() -> list[str]:
    """The files of a packed segment's postings besides ``postings_indptr.npy``."""
    return [f"postings_{kind}_width.npy" for kind in KINDS] + [f"postings_{kind}_{w}.npy" for kind in KINDS for w in WIDTHS]


def _term_widths(counts: np.ndarray, values: np.ndarray, kind: str) -> np.ndarray:
    """The narrowest width each term's ``values`` fit (terms without postings: 1)."""
    widths = np.ones(len(counts), dtype=np.uint8)
    present = np.flatnonzero(counts)
    if not len(present):
        return widths
    starts = (np.cumsum(counts) - counts)[present]
    largest = np.maximum.reduceat(values, starts)
    fits_two = largest <= np.iinfo(np.uint16).max
    if kind == "docs":
        widths[present] = np.where(largest <= np.iinfo(np.uint8).max, 1, np.where(fits_two, 2, 4))
    else:
        whole = np.logical_and.reduceat(values == np.floor(values), starts) & (np.minimum.reduceat(values, starts) >= 0)
        widths[present] = np.where(whole & (largest <= np.iinfo(np.uint8).max), 1, np.where(whole & fits_two, 2, 4))
    return widths


def pack_block(counts: np.ndarray, docs: np.ndarray, tf: np.ndarray) -> dict[str, tuple[np.ndarray, dict[int, np.ndarray]]]:
    """Postings of consecutive terms (``counts[i]`` postings of term i, documents increasing
    within a term) as ``{kind: (width per term, {width: values})}`` for ``docs`` and ``tf``."""
    counts = np.asarray(counts, dtype=np.int64)
    docs = np.asarray(docs, dtype=np.int64)
    gaps = np.diff(docs, prepend=0)
    starts = (np.cumsum(counts) - counts)[counts > 0]
    gaps[starts] = docs[starts]  # a term's first document is stored as itself
    out = {}
    for kind, values, types in (("docs", gaps, GAP_TYPES), ("tf", np.asarray(tf, dtype=np.float32), TF_TYPES)):
        widths = _term_widths(counts, values, kind)
        of_posting = np.repeat(widths, counts)
        out[kind] = (widths, {w: values[of_posting == w].astype(types[w]) for w in WIDTHS})
    return out


class PackedPostings:
    """A segment's packed postings (memory-mapped arrays), read a term at a time."""

    def __init__(self, indptr: np.ndarray, arrays: dict[str, np.ndarray]):
        self.indptr = indptr
        #: the block bounds for dynamic pruning (:class:`~salience.search.block_bounds.BlockBounds`;
        #: None for a segment written before they existed)
        self.bounds = None
        self.counts = np.diff(np.asarray(indptr, dtype=np.int64))
        self.n_terms = len(self.counts)
        self._kinds = {}
        for kind in KINDS:
            widths = np.asarray(arrays[f"postings_{kind}_width.npy"])
            offsets = np.zeros(self.n_terms, dtype=np.int64)
            parts = {}
            for w in WIDTHS:
                chosen = widths == w
                expected = int(self.counts[chosen].sum())
                part = np.asarray(arrays[f"postings_{kind}_{w}.npy"])  # a memmap's plain view: slicing a memmap costs Python calls
                if len(part) != expected:
                    raise ValueError(f"postings_{kind}_{w}.npy holds {len(part)} values, its terms {expected}")
                offsets[chosen] = np.cumsum(self.counts[chosen]) - self.counts[chosen]
                parts[w] = part
            self._kinds[kind] = (widths, offsets, parts)

    @classmethod
    def check(cls, indptr: np.ndarray, arrays: dict[str, np.ndarray], n_docs: int) -> "PackedPostings":
        """The postings, their sizes checked and (reading every gap once, a stream at a time)
        every document number within ``n_docs``; ``ValueError`` says what is wrong."""
        packed = cls(indptr, arrays)
        widths, offsets, parts = packed._kinds["docs"]
        for w in WIDTHS:
            terms = np.flatnonzero((widths == w) & (packed.counts > 0))
            if len(terms):
                last = np.add.reduceat(parts[w], offsets[terms], dtype=np.int64)
                if last.min() < 0 or last.max() >= n_docs:
                    raise ValueError(f"postings_docs_{w}.npy: document numbers beyond the segment's {n_docs}")
        return packed

    def _values(self, kind: str, term: int) -> np.ndarray:
        widths, offsets, parts = self._kinds[kind]
        start = int(offsets[term])
        return parts[int(widths[term])][start:start + int(self.counts[term])]

    def row(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """(document numbers int64, term frequencies float32) of one term."""
        return np.cumsum(self._values("docs", term), dtype=np.int64), self._values("tf", term).astype(np.float32)

    def rows(self, terms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(row pointers, document numbers, term frequencies) of ``terms``, in their order."""
        indptr = np.zeros(len(terms) + 1, dtype=np.int64)
        np.cumsum(self.counts[terms], out=indptr[1:])
        docs = np.empty(int(indptr[-1]), dtype=np.int64)
        tf = np.empty(int(indptr[-1]), dtype=np.float32)
        for i, term in enumerate(terms.tolist()):
            lo, hi = indptr[i], indptr[i + 1]
            np.cumsum(self._values("docs", term), dtype=np.int64, out=docs[lo:hi])
            tf[lo:hi] = self._values("tf", term)
        return indptr, docs, tf

    def unpack(self) -> tuple[np.ndarray, np.ndarray]:
        """Every posting: (document numbers, term frequencies float32), in term order."""
        nnz = int(self.counts.sum())
        docs = np.empty(nnz, dtype=np.int64)
        tf = np.empty(nnz, dtype=np.float32)
        for kind, out in (("docs", docs), ("tf", tf)):
            widths, _, parts = self._kinds[kind]
            of_posting = np.repeat(widths, self.counts)
            for w in WIDTHS:
                out[of_posting == w] = parts[w]
        # gaps to document numbers: a cumulative sum restarted at each term
        np.cumsum(docs, out=docs)
        first = (np.cumsum(self.counts) - self.counts)[self.counts > 0]
        restart = np.zeros(nnz, dtype=np.int64)
        restart[first[1:]] = np.diff(docs[first - 1][1:], prepend=0)
        docs -= np.cumsum(restart)
        return docs, tf

    def kernel_arrays(self) -> tuple:
        """What the numba kernel reads: counts, then per kind (docs, tf) each term's width and
        offset and the three arrays by width."""
        out = [self.counts]
        for kind in KINDS:
            widths, offsets, parts = self._kinds[kind]
            out += [widths, offsets, *(parts[w] for w in WIDTHS)]
        return tuple(out)

    def nbytes(self) -> int:
        return sum(part.nbytes for _, _, parts in self._kinds.values() for part in parts.values())


def _npy_header(dtype, n: int) -> bytes:
    """A version 1.0 ``.npy`` header of exactly 128 bytes for ``n`` items of ``dtype`` (a
    fixed size, so it is written first and rewritten with the count at the end)."""
    text = "{'descr': %r, 'fortran_order': False, 'shape': (%d,), }" % (np.lib.format.dtype_to_descr(np.dtype(dtype)), n)
    body = text.encode("latin1")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", 118) + body + b" " * (117 - len(body)) + b"\n"


class PackedWriter:
    """Packed postings appended a block of terms at a time to a segment folder's files, with
    their block bounds (:mod:`salience.search.block_bounds`) from the documents' lengths."""

    def __init__(self, folder: Path, doc_len: np.ndarray):
        self.folder = folder
        self.doc_len = np.asarray(doc_len, dtype=np.float32)
        self._files: dict[str, tuple[BinaryIO, type]] = {}
        self._counts: dict[str, int] = {}
        for kind, types in KINDS.items():
            self._open(f"postings_{kind}_width.npy", np.uint8)
            for w in WIDTHS:
                self._open(f"postings_{kind}_{w}.npy", types[w])
        for name, dtype in zip(block_bound_files(), (np.int64, np.int64, np.float32, np.float32)):
            self._open(name, dtype)
        self._points = 0  # frontier points written so far

    def _open(self, name: str, dtype) -> None:
        fh = open(self.folder / name, "wb")
        fh.write(_npy_header(dtype, 0))
        self._files[name], self._counts[name] = (fh, dtype), 0

    def _append(self, name: str, values: np.ndarray) -> None:
        fh, dtype = self._files[name]
        fh.write(np.ascontiguousarray(values, dtype=dtype).tobytes())
        self._counts[name] += len(values)

    def write(self, counts: np.ndarray, docs: np.ndarray, tf: np.ndarray) -> None:
        """Postings of the next consecutive terms (see :func:`pack_block`)."""
        for kind, (widths, parts) in pack_block(counts, docs, tf).items():
            self._append(f"postings_{kind}_width.npy", widths)
            for w, values in parts.items():
                self._append(f"postings_{kind}_{w}.npy", values)
        last, per_block, point_tf, point_len = block_frontiers(counts, docs, tf, self.doc_len)
        ends = np.cumsum(per_block) + self._points
        self._points += int(per_block.sum())
        for name, values in zip(block_bound_files(), (last, ends, point_tf, point_len)):
            self._append(name, values)

    def close(self) -> None:
        """Write each file's final count into its header and close it."""
        for name, (fh, dtype) in self._files.items():
            if not fh.closed:
                fh.seek(0)
                fh.write(_npy_header(dtype, self._counts[name]))
                fh.close()

    def abandon(self) -> None:
        for fh, _ in self._files.values():
            fh.close()


#: postings packed at a time when a whole segment is written (packing holds ~40 bytes a posting)
_BLOCK_POSTINGS = 1 << 23


def write_packed(folder: Path, counts: np.ndarray, docs: np.ndarray, tf: np.ndarray, doc_len: np.ndarray) -> None:
    """A segment's postings (``counts[i]`` of term i) written packed into ``folder`` with their
    block bounds, a block of terms at a time so that packing needs little memory beside the
    postings."""
    counts = np.asarray(counts, dtype=np.int64)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    writer = PackedWriter(folder, doc_len)
    try:
        first = 0
        while True:  # terms [first, last) hold about a block of postings (at least one term)
            last = max(first + 1, int(np.searchsorted(indptr, indptr[first] + _BLOCK_POSTINGS, side="right")) - 1)
            last = min(last, len(counts))
            writer.write(counts[first:last], docs[indptr[first]:indptr[last]], tf[indptr[first]:indptr[last]])
            if last >= len(counts):
                break
            first = last
    except BaseException:
        writer.abandon()
        raise
    writer.close()
