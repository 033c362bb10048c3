"""Shards: large jsonl, jsonl.gz and parquet inputs read in pieces of about ``shard_bytes``
(cut at line ends, so boundaries depend only on the file), their records parsed, selected
records written back out atomically, and the on-disk cache of per-shard arrays.

Used by the data pipeline's selection and dedup, and open to every domain that streams a corpus.
"""

from __future__ import annotations

import contextlib
import os
import gzip
import io
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from salience.exceptions import InputFormatError, InvalidParameterError
from salience.extras import require
from salience.io.files import atomic_write_bytes, atomic_write_text, open_raw

__all__ = ["Shard", "Loss", "SHARD_LAYOUT", "iter_shards", "parse_shard", "blob_records", "records", "write_records",
           "prepare_work_dir", "remove_work_dir", "atomic_save"]

# how files are cut into shards; part of a shard cache's key, so a change never reuses old shards
SHARD_LAYOUT = 2


@dataclass
class Shard:
    """A piece of one raw file: ``blob`` (whole jsonl lines, the first numbered ``first_line``)
    or, for parquet, ``rows`` (dicts, the first numbered ``first_line``)."""

    index: int
    path: str
    first_line: int
    blob: bytes | None = None
    rows: list | None = None


@dataclass
class Loss:
    """Records lost from one file by ``on_error="skip"``: a damaged compressed stream ends the
    file early, so what follows the last good line is counted from the bytes left unread.
    ``suspect_lines``: the lines (first, last) that a gzip member whose check failed decoded to:
    the damage lies somewhere among them (a flipped bit is found only at the member's end), so
    none of them is kept."""

    path: str
    after_line: int
    unread_bytes: int
    estimated_records: int | None  # None: unknown (the file ends early)
    reason: str
    suspect_lines: list[int] | None = None  # [first, last]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _gzip_errors() -> tuple:
    try:
        from isal.isal_zlib import error as isal_error
    except ImportError:
        return (OSError, EOFError, zlib.error)
    return (OSError, EOFError, zlib.error, isal_error)


#: what a damaged gzip stream raises, from either decoder
GZIP_ERRORS = _gzip_errors()


def gzip_reader(raw):
    """A gzip decoder over the binary file ``raw``: ISA-L's (``isal``, about 3x zlib's speed on
    this text) where installed, else the standard library's."""
    try:
        from isal.igzip import IGzipFile
    except ImportError:
        return gzip.GzipFile(fileobj=raw, mode="rb")
    return IGzipFile(fileobj=raw, mode="rb")


def iter_shards(paths: Sequence[str | Path], shard_bytes: int = 8 << 20, on_error: str = "raise",
                parquet_rows: int = 20_000, losses: list | None = None) -> Iterator[Shard]:
    """Shards of every file in turn; cut at line ends, so their boundaries depend only on the
    file and ``shard_bytes``. A corrupt gzip stream raises an error naming the file and the last
    complete line; ``on_error="skip"`` ends that file there and appends a :class:`Loss` (the
    unread bytes and the records they hold at the file's rate so far) to ``losses``."""
    index = 0
    for path in map(Path, paths):
        if path.suffix == ".parquet":
            for rows_first, rows in _parquet_batches(path, parquet_rows):
                yield Shard(index, str(path), rows_first, rows=rows)
                index += 1
            continue
        # with "skip", a gzip file's members are checked first: one whose checksum fails is found
        # only at its end, after it decoded to lines that may be wrong anywhere, so the file is
        # read up to the last member that checked out and the rest reported as lost
        damage = _check_gzip_members(path) if path.suffix == ".gz" and on_error == "skip" else None
        line = 1
        pending: list[bytes] = []  # decompressed bytes not yet in a shard
        pending_bytes = 0
        good_position = produced = 0
        raw = open_raw(path) if damage is None else _Prefix(open_raw(path), damage.verified_bytes)
        try:
            fh = gzip_reader(raw) if path.suffix == ".gz" else raw
            with fh:
                # small reads, so that a damaged stream loses at most one read of good lines
                step = min(shard_bytes, 1 << 16)
                while True:
                    block = fh.read(step)
                    good_position = raw.tell()  # compressed bytes consumed by the last good read
                    produced += len(block)
                    if block:
                        pending.append(block)
                        pending_bytes += len(block)
                    if pending_bytes >= shard_bytes or (not block and pending):
                        data = b"".join(pending)
                        cut = data.rfind(b"\n") + 1 if block else len(data)
                        if cut:
                            blob = data[:cut] if data[cut - 1 : cut] == b"\n" else data[:cut] + b"\n"
                            rest = data[cut:]
                            pending, pending_bytes = ([rest], len(rest)) if rest else ([], 0)
                            if blob.strip():
                                yield Shard(index, str(path), line, blob=blob)
                                index += 1
                            line += blob.count(b"\n")
                    if not block:
                        break
            if damage is not None and losses is not None:
                losses.append(damage.loss(path, line - 1))
        except GZIP_ERRORS as err:
            if on_error != "skip":
                raise InputFormatError(f"{path}: unreadable after line {line - 1} ({err}); finished shards are kept.") from None
            data = b"".join(pending)
            if path.suffix == ".gz":
                # the reader decodes whole buffers: decoding again in small pieces salvages the
                # good lines of the last buffer before the damage
                beyond, position = _salvage_gzip(path, produced)
                if beyond:
                    data += beyond
                    produced, good_position = produced + len(beyond), max(good_position, position)
            cut = data.rfind(b"\n") + 1
            if cut:  # the complete lines read before the damage are kept
                yield Shard(index, str(path), line, blob=data[:cut])
                index += 1
                line += data[:cut].count(b"\n")
            if losses is not None:
                losses.append(_loss(path, good_position, produced, line - 1, err))
        finally:
            raw.close()


class _Prefix(io.RawIOBase):
    """The first ``limit`` bytes of an open binary file (the members of a gzip file that checked out)."""

    def __init__(self, raw, limit: int):
        self._raw, self._left = raw, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer)[: self._left]
        n = self._raw.readinto(view) or 0
        self._left -= n
        return n

    def tell(self) -> int:
        return self._raw.tell()

    def close(self) -> None:
        self._raw.close()
        super().close()


@dataclass
class _MemberDamage:
    """Where a gzip file's first failed member starts (compressed bytes, lines before it), what it
    decoded to before the failure showed (lines), and the compressed bytes read by then."""

    verified_bytes: int
    verified_lines: int
    decoded_lines: int
    failed_at: int
    size: int
    error: BaseException

    def loss(self, path: Path, lines_kept: int) -> Loss:
        # the line being decoded when the failure showed is suspect too
        suspect = [self.verified_lines + 1, self.verified_lines + max(self.decoded_lines, 1)]
        lines_seen = self.verified_lines + self.decoded_lines
        # the suspect lines, and the bytes after the failure at the file's compressed bytes per line
        after = self.size - self.failed_at
        estimate = self.decoded_lines + (round(after / (self.failed_at / lines_seen)) if lines_seen and after > 0 else 0)
        where = (f"; lines {suspect[0]}-{suspect[1]} came from a gzip member that failed its check, the damage "
                 "somewhere among them, so none was kept")
        return Loss(str(path), lines_kept, self.size - self.verified_bytes, estimate,
                    f"{type(self.error).__name__}: {self.error}{where}", suspect)


def _check_gzip_members(path: Path, piece: int = 1 << 16) -> _MemberDamage | None:
    """Decode ``path`` member by member, counting lines, keeping nothing; None when no member
    fails its CRC, length or coding (a file cut short is left to the reader, whose lines before
    the cut are whole), else where the first failed member starts."""
    size = path.stat().st_size
    verified_bytes = verified_lines = member_lines = consumed = member_start = 0
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    between = False  # after a member: zero padding may come before the next, as gzip allows
    with open(path, "rb") as fh:
        chunk = fh.read(piece)
        while chunk:
            if between:
                rest = chunk.lstrip(b"\0")
                consumed += len(chunk) - len(rest)
                if not rest:
                    chunk = fh.read(piece)
                    continue
                chunk, between, member_start = rest, False, consumed
            try:
                block = decoder.decompress(chunk)
            except zlib.error as err:
                # decoded again in small pieces: the lines the member gave before the failure showed
                lines, failed_at = _lines_until_failure(path, member_start)
                return _MemberDamage(verified_bytes, verified_lines, lines, failed_at, size, err)
            member_lines += block.count(b"\n")
            consumed += len(chunk)
            if not decoder.eof:
                chunk = fh.read(piece)
                continue
            # the member checked out; the next one (concatenated gzip) starts on the unused bytes
            unused = decoder.unused_data
            consumed -= len(unused)
            verified_bytes, verified_lines, member_lines = consumed, verified_lines + member_lines, 0
            decoder, between = zlib.decompressobj(16 + zlib.MAX_WBITS), True
            chunk = unused or fh.read(piece)
    return None


def _decode_in_pieces(path: Path, start: int = 0, piece: int = 256) -> Iterator[tuple[bytes, int, bool]]:
    """What the gzip stream from byte ``start`` decodes to, fed to zlib ``piece`` bytes at a time
    (concatenated members followed): ``(block, compressed bytes consumed, failed)``; the last
    item is the failure, if any (its piece counted as consumed). Memory: one piece's output."""
    position = start
    decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    with open(path, "rb") as fh:
        fh.seek(start)
        chunk = fh.read(piece)
        while chunk:
            try:
                block = decoder.decompress(chunk)
            except zlib.error:
                yield b"", position + len(chunk), True
                return
            position += len(chunk)
            chunk = fh.read(piece)
            if decoder.eof:  # a member ends: the next one (concatenated gzip) starts on the unused bytes
                chunk, position = decoder.unused_data + chunk, position - len(decoder.unused_data)
                decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
            yield block, position, False


def _lines_until_failure(path: Path, start: int) -> tuple[int, int]:
    """Lines the gzip member starting at byte ``start`` decodes to before its failure; and the
    compressed bytes read by then."""
    lines = position = 0
    # small pieces: zlib drops the output of the call that fails, so little is lost with it
    for block, position, failed in _decode_in_pieces(path, start, piece=32):
        if failed:
            break
        lines += block.count(b"\n")
    return lines, position


def _salvage_gzip(path: Path, skip: int) -> tuple[bytes, int]:
    """What a damaged gzip file decodes to before the damage, past its first ``skip``
    decompressed bytes (already read), from a streamed read (memory stays that of the salvaged
    tail); and the compressed bytes consumed by then."""
    out: list[bytes] = []
    decoded = position = 0
    for block, consumed, failed in _decode_in_pieces(path):
        if failed:
            break
        if decoded + len(block) > skip:
            out.append(block[max(skip - decoded, 0):])
        decoded += len(block)
        position = consumed
    return b"".join(out), position


def estimated_loss(losses: Sequence[Loss]) -> int | None:
    """Records lost over all damaged files: None when any file's loss cannot be estimated."""
    if any(loss.estimated_records is None for loss in losses):
        return None
    return sum(loss.estimated_records for loss in losses)


def _loss(path: Path, position: int, produced: int, lines_read: int, err: BaseException) -> Loss:
    """Estimate the records a damaged gzip file did not give: from its trailer's uncompressed
    size (ISIZE) where that exceeds what was decoded, else from the compressed bytes left after
    the last good read, at the file's bytes per line so far."""
    size = path.stat().st_size
    unread = max(size - position, 0)
    expected = None
    if path.suffix == ".gz" and size >= 18:
        with open(path, "rb") as fh:
            fh.seek(size - 4)
            expected = int.from_bytes(fh.read(4), "little")  # uncompressed size mod 2**32
    trailer_read = "CRC check failed" in str(err) or "Incorrect length" in str(err)
    if isinstance(err, EOFError) or (not unread and not trailer_read):
        estimate = None  # the file ends early: what it lacks cannot be known
    elif trailer_read and expected is not None and lines_read:
        estimate = max(round((expected - produced) / (produced / lines_read)), 0)
    elif lines_read and position:
        estimate = max(round(unread / (position / lines_read)), 1)
    else:
        estimate = None
    return Loss(str(path), lines_read, unread, estimate, f"{type(err).__name__}: {err}")


def _parquet_batches(path: Path, rows: int):
    pq = require("pyarrow.parquet", "parquet", "Reading parquet")
    try:
        first = 1
        for batch in pq.ParquetFile(path).iter_batches(batch_size=rows):
            records = batch.to_pylist()
            yield first, records
            first += len(records)
    except (OSError, ValueError) as err:
        raise InputFormatError(f"{path}: not a readable parquet file ({err}).") from None


def parse_shard(shard: Shard, text_field: str, label_field: str | None, strict: bool, on_error: str):
    """(texts, labels, line numbers, places in the shard, records missing the field, bad records)."""
    texts, labels, numbers, places = [], [], [], []
    missing = errors = 0
    if shard.rows is not None:
        items = ((shard.first_line + i, i, row) for i, row in enumerate(shard.rows))
    else:
        items = blob_records(shard, on_error)
    for number, place, record in items:
        if record is None:
            if on_error == "skip":
                errors += 1
                continue
            raise InputFormatError(f"{shard.path}:{number}: not a UTF-8 JSON record.")
        text = record.get(text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            if strict:
                raise InputFormatError(f"{shard.path}:{number}: record has no text field {text_field!r}.")
            missing += 1
            continue
        texts.append(text)
        labels.append("" if not label_field or record.get(label_field) is None else str(record.get(label_field)))
        numbers.append(number)
        places.append(place)
    return texts, labels, numbers, places, missing, errors


def _json_loads():
    """orjson's parser when installed (several times faster), else the standard library's."""
    try:
        import orjson

        return orjson.loads, (orjson.JSONDecodeError, UnicodeDecodeError, ValueError)
    except ImportError:  # pragma: no cover - orjson is a dependency
        return json.loads, (UnicodeDecodeError, ValueError)


def blob_records(shard: Shard, on_error: str = "raise"):
    """``(line number, place, record)`` of each non-blank line; ``record`` is ``None`` when the
    line is not UTF-8 JSON (with ``on_error="replace"``, invalid UTF-8 is decoded with U+FFFD first)."""
    loads, errors = _json_loads()
    lines = shard.blob.split(b"\n")
    for i, line in enumerate(lines[:-1] if lines and lines[-1] == b"" else lines):
        if not line.strip():
            continue
        try:
            record = loads(line)  # bytes: invalid UTF-8 is rejected
        except errors:
            record = None
            if on_error == "replace":
                try:
                    record = json.loads(line.decode("utf-8", errors="replace"))
                except ValueError:
                    record = None
        yield shard.first_line + i, i, record


def prepare_work_dir(work: Path, settings: dict) -> None:
    """Create ``work``; shards cached there by a run with other settings or other inputs (by
    path, size and modification time) are removed, so a rerun reuses only what still applies."""
    inputs = [(str(Path(p).resolve()), Path(p).stat().st_size, Path(p).stat().st_mtime_ns) for p in settings.pop("inputs")]
    manifest = json.dumps({**settings, "inputs": inputs}, sort_keys=True, default=str)
    stamp = work / "settings.json"
    if work.exists() and not (work.is_dir() and (stamp.is_file() or not any(work.iterdir()))):
        raise InvalidParameterError(
            f"work folder {work} exists and is not a salience shard cache (no settings.json); it is left untouched. "
            "Pass another --work-dir, or remove it."
        )
    work.mkdir(parents=True, exist_ok=True)
    if not stamp.exists() or stamp.read_text(encoding="utf-8") != manifest:
        for stale in work.glob("*.npz"):
            stale.unlink()
        atomic_write_text(stamp, manifest)


def remove_work_dir(work: Path) -> None:
    """Remove what a run put in its shard cache (never other files), then the folder if empty."""
    for pattern in ("*.npz", "settings.json", ".*.tmp"):
        for entry in work.glob(pattern):
            with contextlib.suppress(OSError):
                entry.unlink()
    with contextlib.suppress(OSError):
        work.rmdir()


def atomic_save(path: Path, **arrays) -> None:
    """Save ``arrays`` as one ``.npz`` written atomically (a crash leaves no partial shard)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


# executors ----------------------------------------------------------------------------------------
def records(shard: Shard):
    if shard.rows is not None:
        yield from shard.rows
    else:
        for _, _, record in blob_records(shard):
            yield record


def write_records(out: Path, inputs: Sequence[Path], wanted: dict, shard_bytes: int, on_error: str,
                  kept: dict | None = None) -> int:
    """Write the records ``wanted[shard index] = [(place in shard, copies, extra fields)]`` of
    ``inputs`` (re-read shard by shard) to ``out`` through a temporary file renamed into place.
    ``kept``: shards by index held from an earlier pass; when it holds every wanted shard, the
    inputs are not read again."""
    tmp = out.with_name(out.name + ".tmp")
    # gzip level 1: about 4x faster than the default 9 (or 6) for ~13% more bytes on this kind of text
    opener = (lambda path, mode: gzip.open(path, mode, compresslevel=1)) if out.suffix == ".gz" else open
    loads, _ = _json_loads()
    written = 0
    try:
        with opener(tmp, "wb") as fh:
            if kept is not None and all(index in kept for index in wanted):
                shards = (kept[index] for index in sorted(wanted))
            else:
                shards = iter_shards(inputs, shard_bytes, on_error)
            for shard in shards:
                todo = wanted.get(shard.index)
                if not todo:
                    continue
                lines = shard.blob.split(b"\n") if shard.rows is None else None
                for place, copies, extra in todo:
                    if lines is not None:
                        try:
                            record = loads(lines[place])
                        except ValueError:  # kept by on_error="replace": decode as it was read
                            record = json.loads(lines[place].decode("utf-8", errors="replace"))
                    else:
                        record = dict(shard.rows[place])
                    record.update(extra)
                    fh.write(_dump_record(record) * copies)
                    written += copies
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return written


def _dump_record(record: dict) -> bytes:
    """One jsonl line: orjson when it can encode the record, else the standard library."""
    try:
        import orjson

        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE | orjson.OPT_NON_STR_KEYS)
    except (ImportError, TypeError):
        return (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
