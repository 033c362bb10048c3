"""Streaming DSIR selection over jsonl / jsonl.gz files, in shards, with local worker processes.

Pass 1 reads the raw files once: the main process splits them into shards of ``shard_size``
lines and worker processes parse and hash each shard, returning its bucket counts, each
document's token count and label, and its hashed n-grams, which go to ``work_dir`` (one
``.npz`` per shard, written atomically; a rerun skips the shards already there). Pass 2 turns
the cached n-grams into one log weight per document, and selection keeps ``k`` of them. Pass 3
re-reads the raw files and writes the selected records, each with its weight, to a temporary
file renamed into place at the end: an interrupted run leaves no partial output.

Memory: one float64 weight, one token count and one label per document, plus a shard in flight
per worker; the n-gram cache on disk takes 2 bytes per n-gram (``buckets`` <= 65,536).
"""

from __future__ import annotations

import gzip
import json
import os
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from salience.data.dsir import ImportanceResampler, kl_reduction, resample
from salience.data.features import HashedNgrams
from salience.exceptions import InputFormatError, InvalidParameterError

__all__ = ["select_documents", "SelectionReport", "read_lines"]


@dataclass
class SelectionReport:
    selected: int
    pool: int
    eligible: int
    skipped_no_text: int = 0
    skipped_errors: int = 0
    kl_reduction: float = 0.0
    by_label: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def read_lines(path: str | Path, on_error: str = "raise") -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of a jsonl or jsonl.gz file; a corrupt gzip stream raises an
    error naming the file and the last good line (``on_error="skip"`` stops reading it)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    number = 0
    try:
        with opener(path, "rb") as fh:
            for number, line in enumerate(fh, 1):
                if line.strip():
                    yield number, line
    except (OSError, EOFError, zlib.error) as err:
        if on_error == "skip":
            return
        raise InputFormatError(f"{path}: unreadable after line {number} ({err}).") from None


def _parse_shard(lines: list[tuple[int, bytes]], path: str, text_field: str, label_field: str | None,
                 strict: bool, on_error: str) -> tuple[list[str], list, int, int, list[int]]:
    texts, labels, missing, errors, kept = [], [], 0, 0, []
    for i, (number, line) in enumerate(lines):
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as err:
            if on_error == "skip":
                errors += 1
                continue
            raise InputFormatError(f"{path}:{number}: not a UTF-8 JSON record ({err}).") from None
        text = record.get(text_field) if isinstance(record, dict) else None
        if not isinstance(text, str):
            if strict:
                raise InputFormatError(f"{path}:{number}: record has no text field {text_field!r}.")
            missing += 1
            continue
        texts.append(text)
        labels.append(record.get(label_field) if label_field else None)
        kept.append(i)
    return texts, labels, missing, errors, kept


def _shard_job(args) -> dict:
    lines, path, features, text_field, label_field, strict, on_error = args
    texts, labels, missing, errors, kept = _parse_shard(lines, path, text_field, label_field, strict, on_error)
    batch = features.transform(texts)
    ngram_doc_counts = np.bincount(batch.doc, minlength=len(texts))
    by_doc = np.argsort(batch.doc, kind="stable")  # n-grams come grouped by order: regroup them by document
    return {"counts": batch.counts(features.buckets), "tokens": batch.tokens, "labels": np.array(labels, dtype=object),
            "bucket": batch.bucket[by_doc].astype(np.uint16 if features.buckets <= 65536 else np.uint32),
            "ngrams": ngram_doc_counts, "lines": np.array([lines[i][0] for i in kept], dtype=np.int64),
            "missing": missing, "errors": errors}


def _atomic_save(path: Path, **arrays) -> None:
    tmp = path.with_name(path.name + ".tmp.npz")
    with open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _shards(paths: Sequence[Path], shard_size: int, on_error: str) -> Iterator[tuple[int, Path, list]]:
    index = 0
    for path in paths:
        chunk: list = []
        for item in read_lines(path, on_error):
            chunk.append(item)
            if len(chunk) >= shard_size:
                yield index, path, chunk
                index, chunk = index + 1, []
        if chunk:
            yield index, path, chunk
            index += 1


def select_documents(target: Sequence[str | Path], raw: Sequence[str | Path], k: int, out: str | Path, *,
                     sampling: str = "gumbel", seed: int = 0, text_field: str = "text", label_field: str | None = None,
                     quota_field: str | None = None, quotas: dict | None = None, min_tokens: int = 0,
                     features: HashedNgrams | None = None, length_normalize: bool = False, workers: int = 2,
                     shard_size: int = 4000, work_dir: str | Path | None = None, strict: bool = False,
                     on_error: str = "raise", progress: bool = False) -> SelectionReport:
    """Select ``k`` raw documents for the target distribution and write them to ``out``."""
    if on_error not in ("raise", "skip"):
        raise InvalidParameterError(f"on_error must be 'raise' or 'skip'; got {on_error!r}.")
    if workers < 1:
        raise InvalidParameterError(f"workers must be >= 1; got {workers}.")
    features = features or HashedNgrams()
    out = Path(out)
    raw_paths = [Path(p) for p in raw]
    for p in [*map(Path, target), *raw_paths]:
        if not p.exists():
            raise InputFormatError(f"{p}: no such file.")
    work = Path(work_dir) if work_dir else out.with_name(out.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    timings = {}
    start = time.perf_counter()
    resampler = ImportanceResampler(features, length_normalize=length_normalize)
    for path in target:
        texts = []
        for number, line in read_lines(path):
            t, _, _, _, _ = _parse_shard([(number, line)], str(path), text_field, None, strict, on_error)
            texts.extend(t)
        resampler.fit_target(texts)
    timings["fit_target"] = time.perf_counter() - start

    # pass 1: parse and hash every raw shard (skipping shards finished by an earlier run)
    start = time.perf_counter()
    group_field = quota_field or label_field
    shard_files = []
    pending = {}
    with ProcessPoolExecutor(workers) as pool:
        for index, path, lines in _shards(raw_paths, shard_size, on_error):
            shard_file = work / f"shard-{index:06d}.npz"
            shard_files.append((shard_file, path))
            if shard_file.exists():
                continue
            pending[pool.submit(_shard_job, (lines, str(path), features, text_field, group_field, strict, on_error))] = shard_file
            if len(pending) >= 2 * workers:
                _drain(pending, wait_all=False)
        _drain(pending, wait_all=True)
    timings["hash_raw"] = time.perf_counter() - start

    start = time.perf_counter()
    loaded = [np.load(f, allow_pickle=True) for f, _ in shard_files]
    for shard in loaded:
        resampler.raw_counts += shard["counts"]
    resampler._log_ratio = None
    weights, tokens, labels, where = [], [], [], []
    for (f, path), shard in zip(shard_files, loaded):
        ngram_counts = shard["ngrams"]
        doc = np.repeat(np.arange(len(ngram_counts)), ngram_counts)
        w = np.bincount(doc, weights=resampler.log_ratio[shard["bucket"].astype(np.int64)], minlength=len(ngram_counts))
        if length_normalize:
            w = w / np.maximum(ngram_counts, 1)
        weights.append(w)
        tokens.append(shard["tokens"])
        labels.append(shard["labels"])
        where.extend((path, int(line)) for line in shard["lines"])
    weights = np.concatenate(weights) if weights else np.zeros(0)
    tokens = np.concatenate(tokens) if tokens else np.zeros(0, dtype=np.int64)
    labels = np.concatenate(labels) if labels else np.zeros(0, dtype=object)
    missing = sum(int(s["missing"]) for s in loaded)
    errors = sum(int(s["errors"]) for s in loaded)
    eligible = tokens >= min_tokens
    chosen = resample(weights, k, sampling=sampling, seed=seed, eligible=eligible,
                      groups=labels if quotas else None, quotas=quotas)
    selected_counts = np.zeros(features.buckets)
    offset = 0
    chosen_set = np.zeros(len(weights), dtype=bool)
    chosen_set[chosen] = True
    for shard in loaded:
        n = len(shard["ngrams"])
        mask = chosen_set[offset : offset + n]
        if mask.any():
            doc = np.repeat(np.arange(n), shard["ngrams"])
            selected_counts += np.bincount(shard["bucket"].astype(np.int64)[mask[doc]], minlength=features.buckets)
        offset += n
    timings["weights_and_selection"] = time.perf_counter() - start

    # pass 3: write the selected records with their weights
    start = time.perf_counter()
    _write_selection(out, raw_paths, where, chosen, weights, on_error)
    timings["write"] = time.perf_counter() - start
    by_label = {}
    if group_field:
        values, counts = np.unique(labels[chosen].astype(str), return_counts=True)
        by_label = dict(zip(values.tolist(), counts.tolist()))
    return SelectionReport(len(chosen), len(weights), int(eligible.sum()), missing, errors,
                           kl_reduction(resampler.target_counts, resampler.raw_counts, selected_counts), by_label, timings)


def _drain(pending: dict, wait_all: bool) -> None:
    from concurrent.futures import FIRST_COMPLETED, wait

    while pending:
        done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
        for future in done:
            shard_file = pending.pop(future)
            result = future.result()  # re-raises a worker's error, naming file and line
            _atomic_save(shard_file, **{k: v for k, v in result.items()})
        if not wait_all:
            return


def _write_selection(out: Path, raw_paths: Sequence[Path], where: list, chosen: np.ndarray, weights: np.ndarray,
                     on_error: str) -> None:
    wanted: dict[Path, dict[int, float]] = {}
    for i in np.unique(chosen).tolist():
        path, line = where[i]
        wanted.setdefault(path, {})[line] = float(weights[i])
    repeats = np.bincount(chosen, minlength=len(weights)) if len(chosen) else np.zeros(0, dtype=np.int64)
    repeat_of = {where[i]: int(repeats[i]) for i in np.unique(chosen).tolist()}
    tmp = out.with_name(out.name + ".tmp")
    opener = gzip.open if out.suffix == ".gz" else open
    try:
        with opener(tmp, "wb") as fh:
            for path in raw_paths:
                lines = wanted.get(path)
                if not lines:
                    continue
                for number, line in read_lines(path, on_error):
                    weight = lines.get(number)
                    if weight is None:
                        continue
                    record = json.loads(line.decode("utf-8"))
                    record["salience_weight"] = weight
                    payload = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
                    for _ in range(repeat_of[(path, number)]):
                        fh.write(payload)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
