"""Streaming selection over jsonl, jsonl.gz or parquet files, in shards, on local processes or Ray.

Pass 1 reads the raw files once, in shards of about ``shard_bytes`` bytes (parquet: row
batches), and an executor parses and hashes each shard: its bucket counts, each document's
token count, label and place in the shard, and its hashed n-grams go to
``work_dir`` (one ``.npz`` per shard, written atomically; a rerun skips the shards already
there). Pass 2 scores each document from the cached n-grams — DSIR's log importance weight,
the quality classifier's log-odds or the target n-gram model's log-probability — and
selection keeps ``k`` of them. Pass 3 re-reads the raw files and writes the selected records,
each with its score, to a temporary file renamed into place at the end: an interrupted run
leaves no partial output. The report (counts by label, KL reduction, timings) goes to
``OUT.report.json``.

Memory: 16 bytes a document (a float64 score and two int32 positions; 20 with a label field),
plus a shard in flight per worker; the n-gram cache on disk takes 2 bytes per n-gram
(``buckets`` <= 65,536) and is removed after a successful run unless ``keep_work``.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from salience.core.checks import check_k, check_n_jobs
from salience.data.dsir import ImportanceResampler, kl_reduction, resample
from salience.data.features import HashedNgrams
from salience.data.methods import DATA_METHODS
from salience.data.scorers import NgramPerplexity, QualityClassifier, parse_filter, per_document_sums, text_statistics
from salience.exceptions import InputFormatError, InvalidParameterError, MissingDependencyError, unknown_choice
from salience.io.files import atomic_write_bytes, atomic_write_text, check_on_error, check_output_path, open_raw

__all__ = ["select_documents", "SelectionReport", "iter_shards", "parse_shard", "make_executor", "write_records",
           "METHODS", "EXECUTORS"]

METHODS = DATA_METHODS
# how files are cut into shards; part of the cache key, so a change never reuses old shards
SHARD_LAYOUT = 2
EXECUTORS = ("local", "ray")


@dataclass
class SelectionReport:
    method: str
    selected: int
    pool: int
    eligible: int
    skipped_no_text: int = 0
    skipped_errors: int = 0
    truncated_files: list = field(default_factory=list)
    lost_records_estimated: int = 0
    kl_reduction: float = 0.0
    by_label: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    shards: int = 0
    shards_reused: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


# reading ------------------------------------------------------------------------------------------
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
    file early, so what follows the last good line is counted from the bytes left unread."""

    path: str
    after_line: int
    unread_bytes: int
    estimated_records: int | None  # None: unknown (the file ends early)
    reason: str

    def to_dict(self) -> dict:
        return dict(self.__dict__)


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
        line = 1
        pending: list[bytes] = []  # decompressed bytes not yet in a shard
        pending_bytes = 0
        good_position = produced = 0
        raw = open_raw(path)
        try:
            fh = gzip.GzipFile(fileobj=raw, mode="rb") if path.suffix == ".gz" else raw
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
        except (OSError, EOFError, zlib.error) as err:
            if on_error != "skip":
                raise InputFormatError(f"{path}: unreadable after line {line - 1} ({err}); finished shards are kept.") from None
            data = b"".join(pending)
            cut = data.rfind(b"\n") + 1
            if cut:  # the complete lines read before the damage are kept
                yield Shard(index, str(path), line, blob=data[:cut])
                index += 1
                line += data[:cut].count(b"\n")
            if losses is not None:
                losses.append(_loss(path, good_position, produced, line - 1, err))
        finally:
            raw.close()


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
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependencyError("Reading parquet needs pyarrow. Install it with: pip install 'salience[parquet]'") from None
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
        items = _blob_records(shard, on_error)
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


def _blob_records(shard: Shard, on_error: str = "raise"):
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


def _hash_shard(shard: Shard, features: HashedNgrams, text_field: str, label_field: str | None,
                strict: bool, on_error: str) -> dict:
    texts, labels, numbers, places, missing, errors = parse_shard(shard, text_field, label_field, strict, on_error)
    batch = features.transform(texts)
    n = len(texts)
    # transform lays n-grams out order by order, each order in document order: keep that layout
    part_counts = np.zeros((len(features.orders), n), dtype=np.int32)
    position = 0
    for o, order in enumerate(features.orders):
        size = int(np.maximum(batch.tokens - order + 1, 0).sum())
        part_counts[o] = np.bincount(batch.doc[position : position + size], minlength=n)
        position += size
    stats = {f"stat_{name}": values.astype(np.float32) for name, values in text_statistics(texts).items()}
    return {**stats, "counts": batch.counts(features.buckets), "tokens": batch.tokens.astype(np.int32),
            "labels": np.array(labels, dtype=str), "places": np.array(places, dtype=np.int64),
            "bucket": batch.bucket.astype(np.uint16 if features.buckets <= 65536 else np.uint32),
            "part_counts": part_counts, "missing": missing, "errors": errors}


def _hash_job(args) -> dict:
    shard, shard_file, features, text_field, label_field, strict, on_error = args
    result = _hash_shard(shard, features, text_field, label_field, strict, on_error)
    _atomic_save(Path(shard_file), **result)
    return {"shard_file": shard_file}


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


def _atomic_save(path: Path, **arrays) -> None:
    """Save ``arrays`` as one ``.npz`` written atomically (a crash leaves no partial shard)."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


# executors ----------------------------------------------------------------------------------------
def _exit_with_parent(parent: int) -> None:
    """Pool worker initializer: a daemon thread ends the worker soon after its parent dies (a
    killed run must not leave workers writing into its work folder)."""
    import threading

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="salience-parent-watch", daemon=True).start()


class _LocalExecutor:
    def __init__(self, n_jobs: int):
        from concurrent.futures import ProcessPoolExecutor

        self.pool = (ProcessPoolExecutor(n_jobs, initializer=_exit_with_parent, initargs=(os.getpid(),))
                     if n_jobs > 1 else None)
        self.limit = 2 * n_jobs
        self.pending: list = []

    def submit(self, job, args) -> None:
        if self.pool is None:
            job(args)
            return
        self.pending.append(self.pool.submit(job, args))
        if len(self.pending) >= self.limit:
            self._wait(self.limit // 2)

    def _wait(self, keep: int) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait

        while len(self.pending) > keep:
            done, rest = wait(self.pending, return_when=FIRST_COMPLETED)
            for future in done:
                future.result()  # re-raises a worker's error, naming file and line
            self.pending = list(rest)

    def drain(self) -> None:
        self._wait(0)

    def map(self, job, items: list) -> list:
        if self.pool is None:
            return [job(item) for item in items]
        return list(self.pool.map(job, items))

    def close(self) -> None:
        try:
            self._wait(0)
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)


class _RayExecutor:
    def __init__(self, n_jobs: int):
        try:
            import ray
        except ImportError:
            raise MissingDependencyError("The Ray executor needs Ray. Install it with: pip install 'salience[ray]'") from None
        self.ray = ray
        if not ray.is_initialized():
            if os.environ.get("RAY_ADDRESS"):  # join the cluster the environment names
                ray.init(log_to_driver=False)
            else:  # a local Ray instance with `n_jobs` CPUs
                ray.init(num_cpus=n_jobs, include_dashboard=False, log_to_driver=False)
        self.tasks: dict = {}
        self.limit = 2 * n_jobs
        self.pending: list = []

    def submit(self, job, args) -> None:
        task = self.tasks.get(job)
        if task is None:
            task = self.tasks[job] = self.ray.remote(job)
        self.pending.append(task.remote(args))
        if len(self.pending) >= self.limit:
            done, self.pending = self.ray.wait(self.pending, num_returns=len(self.pending) - self.limit // 2)
            self._get(done)

    def _get(self, refs) -> None:
        try:
            self.ray.get(refs)
        except self.ray.exceptions.RayTaskError as err:
            raise (err.as_instanceof_cause() if hasattr(err, "as_instanceof_cause") else err) from None

    def drain(self) -> None:
        refs, self.pending = self.pending, []
        self._get(refs)

    def map(self, job, items: list) -> list:
        task = self.tasks.get(job)
        if task is None:
            task = self.tasks[job] = self.ray.remote(job)
        refs = [task.remote(item) for item in items]
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayTaskError as err:
            raise (err.as_instanceof_cause() if hasattr(err, "as_instanceof_cause") else err) from None

    def close(self) -> None:
        self.drain()


def make_executor(name: str, n_jobs: int):
    """An executor for shard jobs: ``submit(job, args)`` (bounded in flight), ``drain()`` (wait,
    re-raising a job's error), ``map(job, items)`` (results in order) and ``close()``."""
    if name not in EXECUTORS:
        raise unknown_choice("executor", name, EXECUTORS)
    n_jobs = check_n_jobs(n_jobs)
    return _LocalExecutor(n_jobs) if name == "local" else _RayExecutor(n_jobs)


# selection ----------------------------------------------------------------------------------------
def _read_texts(paths: Sequence[str | Path], text_field: str, strict: bool, on_error: str,
                losses: list | None = None) -> list[str]:
    texts = []
    missing = 0
    fields: set = set()
    for shard in iter_shards(paths, on_error=on_error, losses=losses):
        parsed = parse_shard(shard, text_field, None, strict, on_error)
        texts.extend(parsed[0])
        missing += parsed[4]
        if parsed[4] and len(fields) < 20:
            fields.update(k for r in _records(shard) if isinstance(r, dict) for k in r)
    if not texts and missing:
        raise InputFormatError(
            f"none of the {missing} target records has a text field {text_field!r} (fields seen: "
            f"{', '.join(sorted(map(str, fields))[:10]) or 'none'}); pass text_field= (CLI: --text-field) naming the field."
        )
    return texts


def is_selection_output(path: Path) -> bool:
    """Whether ``path`` was written by an earlier selection or dedup (its report lies beside it)."""
    return Path(path).is_file() and Path(path).with_name(Path(path).name + ".report.json").is_file()


def select_documents(target: Sequence[str | Path], raw: Sequence[str | Path], out: str | Path, *, k: int,
                     method: str = "dsir", sampling: str = "gumbel", seed: int = 0, text_field: str = "text",
                     label_field: str | None = None, quota_field: str | None = None, quotas: dict | None = None,
                     min_tokens: int = 0, filters: Sequence[str] = (), features: HashedNgrams | None = None,
                     length_normalize: bool = False, n_jobs: int = 2, executor: str = "local", shard_bytes: int = 8 << 20,
                     work_dir: str | Path | None = None, keep_work: bool = False, strict: bool = False,
                     on_error: str = "raise", show_progress: bool = False, classifier_raw_docs: int = 5_000) -> SelectionReport:
    """Select ``k`` raw documents for the target and write them to ``out`` (jsonl, or jsonl.gz by
    suffix), each with a ``salience_score`` field. ``quota_field`` with ``quotas`` ({value: count})
    selects per group instead of ``k`` overall; without ``quotas``, ``k`` is split over the
    groups in proportion to their share of the target sample. ``min_tokens`` and ``filters``
    (``"alpha_ratio>=0.7"``, ``"mean_word_length<=10"``, ...; see
    :func:`~salience.data.scorers.text_statistics`) decide which documents are eligible."""
    if method not in METHODS:
        raise unknown_choice("method", method, METHODS)
    check_on_error(on_error)
    n_jobs = check_n_jobs(n_jobs)
    k = check_k(k)
    features = features or HashedNgrams()
    rules = [parse_filter(f) for f in filters]
    if method == "perplexity" and features.orders != (1, 2):
        raise InvalidParameterError(f"method='perplexity' needs n-gram orders (1, 2); got {features.orders}.")
    target, raw = list(map(Path, target)), list(map(Path, raw))
    if not target or not raw:
        raise InvalidParameterError("give at least one target file and one raw file.")
    for p in [*target, *raw]:
        if not p.exists():
            raise InputFormatError(f"{p}: no such file.")
    out = check_output_path(out, [*target, *raw], what="output", is_own=is_selection_output)
    work = Path(work_dir) if work_dir else out.with_name(out.name + ".work")
    group_field = quota_field or label_field
    # strict / on_error are not part of the cache key: a cached shard keeps its counts of skipped
    # records, checked against the current policy below
    prepare_work_dir(work, {"features": repr(features), "text_field": text_field, "label_field": group_field,
                            "shard_bytes": shard_bytes, "shard_layout": SHARD_LAYOUT, "inputs": raw})
    timings: dict[str, float] = {}

    clock = time.perf_counter()
    losses: list[Loss] = []
    target_texts = _read_texts(target, text_field, strict, on_error, losses)
    resampler = ImportanceResampler(features, length_normalize=length_normalize)
    target_batch = features.transform(target_texts)
    resampler.update_target(target_batch)
    resampler.check_target()
    target_groups = None
    if quota_field and not quotas:
        target_groups = [str(r.get(quota_field)) for s in iter_shards(target) for r in _records(s) if isinstance(r, dict)]
    timings["read_target"] = time.perf_counter() - clock

    # pass 1: hash every raw shard that an earlier run did not finish
    clock = time.perf_counter()
    shard_files: list[tuple[Path, str]] = []
    reused = 0
    runner = make_executor(executor, n_jobs)
    try:
        bar = _progress(show_progress, "hashing shards")
        try:
            for shard in iter_shards(raw, shard_bytes, on_error, losses=losses):
                shard_file = work / f"shard-{shard.index:06d}.npz"
                shard_files.append((shard_file, shard.path))
                if shard_file.exists():
                    reused += 1
                else:
                    runner.submit(_hash_job, (shard, str(shard_file), features, text_field, group_field, strict, on_error))
                if bar is not None:
                    bar.update(1)
            runner.drain()
        finally:
            if bar is not None:
                bar.close()
        timings["hash_raw"] = time.perf_counter() - clock

        # pass 2: scores from the cached n-grams, shard by shard on the executor
        clock = time.perf_counter()
        for shard_file, _ in shard_files:
            with np.load(shard_file) as shard:
                resampler.raw_counts += shard["counts"]
        resampler._log_ratio = None
        scorer = _fit_scorer(method, resampler, target_batch, shard_files, features, classifier_raw_docs)
        parts = runner.map(_score_job, [(str(f), scorer, min_tokens, rules, bool(group_field)) for f, _ in shard_files])
        # per document in memory: a float64 score (-inf when too short), its place in its shard and
        # the shard (int32 each), and with a label field an int32 label code: 16-20 bytes a document
        label_code: dict[str, int] = {}
        codes = []
        for part in parts:
            if group_field:
                names, inverse = part.pop("label_names"), part.pop("label_index")
                lookup = np.array([label_code.setdefault(n, len(label_code)) for n in names], dtype=np.int32)
                codes.append(lookup[inverse] if len(names) else np.zeros(0, dtype=np.int32))
        scores = np.concatenate([p["scores"] for p in parts]) if parts else np.zeros(0)
        places = np.concatenate([p["places"] for p in parts]) if parts else np.zeros(0, dtype=np.int32)
        shard_of = np.repeat(np.arange(len(parts), dtype=np.int32), [len(p["scores"]) for p in parts])
        missing, errors = sum(p["missing"] for p in parts), sum(p["errors"] for p in parts)
        for (shard_file, path), part in zip(shard_files, parts):
            if (strict and part["missing"]) or (on_error == "raise" and part["errors"]):
                what = "records without the text field" if strict and part["missing"] else "unreadable records"
                raise InputFormatError(f"{path}: {what} in {shard_file.name}, hashed by an earlier lenient run; "
                                       f"remove {work} to read the file again and see the lines.")
        eligible = sum(p["eligible"] for p in parts)
        del parts
        labels = (np.concatenate(codes) if codes else np.zeros(0, dtype=np.int32)) if group_field else None
        label_names = list(label_code)
        if quota_field and not quotas:
            quotas = _proportional_quotas(target_groups, k)
        if quotas:
            absent = [g for g in quotas if str(g) not in label_code]
            if absent:
                raise InvalidParameterError(f"quota group {absent[0]!r} has no documents in the raw pool "
                                            f"(values of {quota_field!r} seen: {label_names[:10]}).")
            quotas = {label_code[str(g)]: q for g, q in quotas.items()}
        chosen = resample(scores, k, sampling=sampling, seed=seed, groups=labels if quotas else None, quotas=quotas)
        picks = np.bincount(chosen, minlength=len(scores)) if len(chosen) else np.zeros(len(scores), dtype=np.int64)
        offsets = np.concatenate(([0], np.cumsum(np.bincount(shard_of, minlength=len(shard_files)))))
        jobs = [(str(f), picks[offsets[i] : offsets[i + 1]], features.buckets) for i, (f, _) in enumerate(shard_files)
                if picks[offsets[i] : offsets[i + 1]].any()]
        selected_counts = np.sum(runner.map(_picked_counts_job, jobs), axis=0) if jobs else np.zeros(features.buckets)
        timings["score_and_select"] = time.perf_counter() - clock
    finally:
        runner.close()

    # pass 3: write the selected records with their scores
    clock = time.perf_counter()
    _write_selection(out, raw, shard_files, shard_of, places, chosen, scores, shard_bytes, on_error)
    timings["write"] = time.perf_counter() - clock
    by_label = {}
    if group_field:
        values, counts = np.unique(labels[chosen], return_counts=True)
        by_label = {label_names[v]: c for v, c in zip(values.tolist(), counts.tolist())}
    report = SelectionReport(method, len(chosen), len(scores), eligible, missing, errors,
                             [loss.to_dict() for loss in losses], sum(loss.estimated_records or 0 for loss in losses),
                             kl_reduction(resampler.target_counts, resampler.raw_counts, selected_counts), by_label,
                             timings, len(shard_files), reused)
    atomic_write_text(out.with_name(out.name + ".report.json"), json.dumps(report.to_dict(), indent=1))
    if not keep_work:
        remove_work_dir(work)
    return report


def _score_job(args) -> dict:
    shard_file, scorer, min_tokens, rules, with_labels = args
    with np.load(shard_file) as shard:
        value = scorer(shard)
        ok = shard["tokens"] >= min_tokens
        for name, op, bound in rules:
            stat = shard[f"stat_{name}"]
            ok &= (stat >= bound) if op == ">=" else (stat <= bound)
        part = {"scores": np.where(ok, value, -np.inf), "places": shard["places"].astype(np.int32),
                "eligible": int(ok.sum()), "missing": int(shard["missing"]), "errors": int(shard["errors"])}
        if with_labels:
            names, inverse = np.unique(shard["labels"], return_inverse=True)
            part["label_names"], part["label_index"] = names.tolist(), inverse.reshape(-1)
    return part


def _picked_counts_job(args) -> np.ndarray:
    """Bucket counts of the picked documents of one shard (a document picked twice counts twice)."""
    shard_file, picks, buckets = args
    with np.load(shard_file) as shard:
        bucket = shard["bucket"]
        total = np.zeros(buckets)
        for copies in np.unique(picks[picks > 0]).tolist():  # 1, or more when sampled with replacement
            mask = np.concatenate([np.repeat(picks == copies, c) for c in shard["part_counts"]])
            total += copies * np.bincount(bucket[mask], minlength=buckets)
        return total


def _records(shard: Shard):
    if shard.rows is not None:
        yield from shard.rows
    else:
        for _, _, record in _blob_records(shard):
            yield record


def _proportional_quotas(groups: list[str] | None, k: int) -> dict:
    if not groups:
        raise InvalidParameterError("quota_field is not in the target records: give quotas explicitly.")
    values, counts = np.unique(np.array(groups), return_counts=True)
    share = counts / counts.sum() * k
    quota = np.floor(share).astype(int)
    quota[np.argsort(-(share - quota))[: k - quota.sum()]] += 1  # largest remainders
    return dict(zip(values.tolist(), quota.tolist()))


class _DsirScore:
    def __init__(self, log_ratio: np.ndarray, length_normalize: bool):
        self.log_ratio, self.length_normalize = log_ratio, length_normalize

    def __call__(self, shard) -> np.ndarray:
        w = per_document_sums(self.log_ratio[shard["bucket"]], shard["part_counts"])
        return w / np.maximum(shard["part_counts"].sum(axis=0), 1) if self.length_normalize else w


class _PerplexityScore:
    def __init__(self, lm: NgramPerplexity):
        self.lm = lm

    def __call__(self, shard) -> np.ndarray:
        tokens = shard["tokens"].astype(np.int64)
        n_unigrams = int(tokens.sum())
        bucket = shard["bucket"].astype(np.int64)
        return self.lm.score_parts(bucket[:n_unigrams], bucket[n_unigrams:], tokens)


class _ClassifierScore:
    def __init__(self, clf: QualityClassifier):
        self.clf = clf

    def __call__(self, shard) -> np.ndarray:
        return self.clf.score_parts(shard["bucket"].astype(np.int64), shard["part_counts"])


def _fit_scorer(method, resampler, target_batch, shard_files, features, classifier_raw_docs):
    if method == "dsir":
        return _DsirScore(resampler.log_ratio, resampler.length_normalize)
    if method == "perplexity":
        return _PerplexityScore(NgramPerplexity(features.buckets).fit(target_batch))
    # classifier: train on the target against the first raw documents
    from salience.data.features import NgramBatch

    buckets, docs, tokens, taken = [], [], [], 0
    for shard_file, _ in shard_files:
        with np.load(shard_file) as shard:
            counts = shard["part_counts"]
            n = counts.shape[1]
            buckets.append(shard["bucket"].astype(np.int64))
            docs.append(np.concatenate([np.repeat(np.arange(n), c) for c in counts]) + taken)
            tokens.append(shard["tokens"])
            taken += n
        if taken >= classifier_raw_docs:
            break
    raw_batch = NgramBatch(np.concatenate(buckets), np.concatenate(docs), np.concatenate(tokens))
    return _ClassifierScore(QualityClassifier(features.buckets).fit(target_batch, raw_batch))


def _write_selection(out: Path, raw: Sequence[Path], shard_files, shard_of, places, chosen, scores,
                     shard_bytes: int, on_error: str) -> None:
    picks = np.bincount(chosen, minlength=len(scores)) if len(chosen) else np.zeros(len(scores), dtype=np.int64)
    wanted: dict[int, list[tuple[int, int, dict]]] = {}
    for i in np.flatnonzero(picks).tolist():
        wanted.setdefault(int(shard_of[i]), []).append((int(places[i]), int(picks[i]), {"salience_score": float(scores[i])}))
    write_records(out, raw, wanted, shard_bytes, on_error)


def write_records(out: Path, inputs: Sequence[Path], wanted: dict, shard_bytes: int, on_error: str) -> int:
    """Write the records ``wanted[shard index] = [(place in shard, copies, extra fields)]`` of
    ``inputs`` (re-read shard by shard) to ``out`` through a temporary file renamed into place."""
    tmp = out.with_name(out.name + ".tmp")
    # gzip level 1: about 4x faster than the default 9 (or 6) for ~13% more bytes on this kind of text
    opener = (lambda path, mode: gzip.open(path, mode, compresslevel=1)) if out.suffix == ".gz" else open
    loads, _ = _json_loads()
    written = 0
    try:
        with opener(tmp, "wb") as fh:
            for shard in iter_shards(inputs, shard_bytes, on_error):
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


def _progress(enabled: bool, what: str):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(desc=what, unit="shard")
