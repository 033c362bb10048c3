"""A journal of coalition values, so that a long valuation killed midway resumes where it stopped.

Every coalition a :class:`~salience.data.utility.ModelUtility` evaluates is appended to the
journal (its mask packed to bits, its value, the fits it took) and flushed to disk batch by batch.
A rerun with the same data, model, method and seed draws the same coalitions; those already in
the journal are replayed instead of refitted (and count as the fits they took, so budgets and
results are those of a run that never stopped). The first line fingerprints the run: a journal
written for other data or other settings is refused, never silently mixed in. Each line carries
the CRC32 of its content: a damaged line (a flipped bit) is dropped and its coalition evaluated
again, never replayed with a wrong value.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from salience.exceptions import InputFormatError

__all__ = ["CoalitionJournal", "fingerprint"]

# 2: each line ends in the CRC32 of the rest
_FORMAT = "salience-coalitions/2"


def fingerprint(*parts: Any) -> str:
    """A digest of arrays (their dtype, shape and bytes) and of anything else by its repr."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            array = np.ascontiguousarray(part)
            digest.update(f"{array.dtype}{array.shape}".encode())
            digest.update(array.tobytes() if array.dtype != object else repr(array.tolist()).encode())
        else:
            digest.update(repr(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()


class CoalitionJournal:
    """Coalition values on disk at ``path`` for the run ``run_fingerprint`` identifies. ``known``
    maps a packed mask to (value, fits); :meth:`record` appends a batch durably."""

    def __init__(self, path: str | Path, run_fingerprint: str):
        self.path = Path(path)
        self.fingerprint = run_fingerprint
        self.known: dict[bytes, tuple[float, int]] = {}
        self.replayed = 0
        if self.path.exists():
            self._read()
        else:
            self._rewrite()

    def _read(self) -> None:
        with open(self.path, "rb") as fh:
            lines = fh.read().split(b"\n")
        try:
            header = json.loads(lines[0])
        except (ValueError, UnicodeDecodeError):
            header = None
        if isinstance(header, dict) and header.get("format") == "salience-coalitions/1":
            raise InputFormatError(f"{self.path}: a coalition journal of an older salience, without checksums; remove "
                                   "it to start afresh.")
        if not isinstance(header, dict) or header.get("format") != _FORMAT:
            raise InputFormatError(f"{self.path}: not a coalition journal of salience; remove it or choose another path.")
        if header.get("fingerprint") != self.fingerprint:
            raise InputFormatError(f"{self.path}: a journal of another run (other data, model, method or seed); "
                                   "remove it to start afresh, or resume with the settings that wrote it.")
        # the last line may have been cut by the kill: a line counts only when it ends in a newline
        damaged = 0
        for line in lines[1:-1]:
            try:
                content, crc = line.rsplit(b" ", 1)
                if int(crc, 16) != zlib.crc32(content):
                    raise ValueError("checksum")
                key, value, fits = content.split(b" ")
                self.known[bytes.fromhex(key.decode())] = (float(value), int(fits))
            except ValueError:
                damaged += 1
        if damaged:
            warnings.warn(f"{self.path}: {damaged} damaged line(s) in the coalition journal (checksum mismatch): those "
                          "coalitions are evaluated again.", stacklevel=3)
        if lines[-1] or damaged:  # a cut last line or damaged ones: rewrite without them before appending
            self._rewrite()

    def _rewrite(self) -> None:
        """The journal as known so far (the header alone at first), replaced atomically."""
        from salience.io.files import atomic_write_text

        header = json.dumps({"format": _FORMAT, "fingerprint": self.fingerprint}) + "\n"
        atomic_write_text(self.path, header + "".join(_line(key, value, fits) for key, (value, fits) in self.known.items()))

    @staticmethod
    def key(mask: np.ndarray) -> bytes:
        return np.packbits(mask).tobytes()

    def record(self, masks: np.ndarray, values: np.ndarray, fits: np.ndarray) -> None:
        """Append evaluated coalitions, flushed and synced before returning."""
        lines = []
        for mask, value, fit in zip(masks, values.tolist(), fits.tolist()):
            key = self.key(mask)
            self.known[key] = (value, int(fit))
            lines.append(_line(key, value, int(fit)))
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.writelines(lines)
            fh.flush()
            os.fsync(fh.fileno())

    def remove(self) -> None:
        """Delete the journal (the run finished and its output is written)."""
        self.path.unlink(missing_ok=True)


def _line(key: bytes, value: float, fits: int) -> str:
    content = f"{key.hex()} {value!r} {fits}"
    return f"{content} {zlib.crc32(content.encode('ascii')):08x}\n"
