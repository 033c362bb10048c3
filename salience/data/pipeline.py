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

Reading shards and writing records is :mod:`salience.io.shards`; the executors (local
processes, Ray) are :mod:`salience.parallel`.

Memory: 16 bytes a document (a float64 score and two int32 positions; 20 with a label field),
plus a shard in flight per worker; the n-gram cache on disk takes 2 bytes per n-gram
(``buckets`` <= 65,536) and is removed after a successful run unless ``keep_work``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from salience.core.checks import check_k, check_n_jobs, check_seed
from salience.data.dsir import ImportanceResampler, kl_reduction, resample
from salience.text.features import HashedNgrams
from salience.data.scorers import parse_filter, text_statistics
from salience.exceptions import InputFormatError, InvalidParameterError
from salience.io.files import atomic_write_text, check_on_error, check_output_path
from salience.io.shards import (SHARD_LAYOUT, Loss, Shard, atomic_save, estimated_loss, iter_shards, parse_shard,
                                prepare_work_dir, records, remove_work_dir, write_records)
from salience.parallel import make_executor, progress_bar

__all__ = ["select_documents", "SelectionReport", "is_selection_output", "check_selection_outputs"]


@dataclass
class SelectionReport:
    method: str
    selected: int
    pool: int
    eligible: int
    skipped_no_text: int = 0
    skipped_errors: int = 0
    truncated_files: list = field(default_factory=list)
    lost_records_estimated: int | None = 0  # None: some loss cannot be estimated
    kl_reduction: float = 0.0
    by_label: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    shards: int = 0
    shards_reused: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


#: decompressed raw text held in memory from the hashing pass for the write pass, which then
#: does not read (and decompress) the raw files again; larger pools are read again
KEEP_RAW_BYTES = 256 << 20


# reading ------------------------------------------------------------------------------------------
def _hash_shard(shard: Shard, features: HashedNgrams, text_field: str, label_field: str | None,
                strict: bool, on_error: str, statistics: bool = True) -> dict:
    texts, labels, numbers, places, missing, errors = parse_shard(shard, text_field, label_field, strict, on_error)
    batch = features.transform(texts)
    # transform lays n-grams out order by order, each order in document order: keep that layout
    part_counts = batch.order_counts.astype(np.int32)
    # the quality statistics cost about half as much as the hashing: computed only for --filter rules
    stats = ({f"stat_{name}": values.astype(np.float32) for name, values in text_statistics(texts).items()}
             if statistics else {})
    return {**stats, "counts": batch.counts(features.buckets), "tokens": batch.tokens.astype(np.int32),
            "labels": np.array(labels, dtype=str), "places": np.array(places, dtype=np.int64),
            "bucket": batch.bucket.astype(np.uint16 if features.buckets <= 65536 else np.uint32),
            "part_counts": part_counts, "missing": missing, "errors": errors}


def _has_statistics(shard_file: Path) -> bool:
    """Whether a cached shard holds the quality statistics (a run without --filter leaves them out)."""
    with np.load(shard_file) as shard:
        return "stat_words" in shard.files


def _hash_job(args) -> dict:
    shard, shard_file, features, text_field, label_field, strict, on_error, statistics = args
    result = _hash_shard(shard, features, text_field, label_field, strict, on_error, statistics)
    atomic_save(Path(shard_file), **result)
    return {"shard_file": shard_file}


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
            fields.update(k for r in records(shard) if isinstance(r, dict) for k in r)
    if not texts and missing:
        raise InputFormatError(
            f"none of the {missing} target records has a text field {text_field!r} (fields seen: "
            f"{', '.join(sorted(map(str, fields))[:10]) or 'none'}); pass text_field= (CLI: --text-field) naming the field."
        )
    return texts


#: fields every report of ``select`` and ``dedup`` has (how an earlier report is told from a user's file)
_REPORT_FIELDS = {"skipped_no_text", "skipped_errors", "truncated_files", "lost_records_estimated", "seconds"}


def report_path(out: Path) -> Path:
    return out.with_name(out.name + ".report.json")


def is_selection_report(path: Path) -> bool:
    """Whether ``path`` is a report an earlier selection or dedup wrote."""
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and _REPORT_FIELDS <= report.keys()


def is_selection_output(path: Path) -> bool:
    """Whether ``path`` was written by an earlier selection or dedup (its report lies beside it)."""
    return Path(path).is_file() and is_selection_report(report_path(Path(path)))


def check_selection_outputs(out: str | Path, inputs: Sequence[Path]) -> Path:
    """``out`` and the report beside it: each new, or the command's own earlier output; never an
    input. Returns ``out`` resolved."""
    if not str(out).endswith((".jsonl", ".jsonl.gz")):
        raise InvalidParameterError(f"--out {out}: the output is JSON lines, so its name ends in .jsonl (or .jsonl.gz "
                                    "to compress it); another suffix would misname the file.")
    out = check_output_path(out, inputs, what="output", is_own=is_selection_output)
    check_output_path(report_path(out), inputs, what="output", is_own=is_selection_report, option="the report")
    return out


def select_documents(target: Sequence[str | Path], raw: Sequence[str | Path], out: str | Path, *, k: int,
                     method: str = "dsir", sampling: str = "gumbel", seed: int = 0, text_field: str = "text",
                     label_field: str | None = None, quota_field: str | None = None, quotas: dict | None = None,
                     min_tokens: int = 0, filters: Sequence[str] = (), features: HashedNgrams | None = None,
                     length_normalize: bool = False, n_jobs: int = 2, executor="local", shard_bytes: int = 8 << 20,
                     work_dir: str | Path | None = None, keep_work: bool = False, strict: bool = False,
                     on_error: str = "raise", show_progress: bool = False, classifier_raw_docs: int = 5_000) -> SelectionReport:
    """Select ``k`` raw documents for the target and write them to ``out`` (jsonl, or jsonl.gz by
    suffix), each with a ``salience_score`` field. ``quota_field`` with ``quotas`` ({value: count})
    selects per group instead of ``k`` overall; without ``quotas``, ``k`` is split over the
    groups in proportion to their share of the target sample. ``min_tokens`` and ``filters``
    (``"alpha_ratio>=0.7"``, ``"mean_word_length<=10"``, ...; see
    :func:`~salience.data.scorers.text_statistics`) decide which documents are eligible."""
    from salience.core.base import method_factory

    scorer_class = method_factory("data", method)  # an unknown name: refused with a did-you-mean
    check_on_error(on_error)
    n_jobs = check_n_jobs(n_jobs)
    k = check_k(k)
    shard_bytes = check_k(shard_bytes, "shard_bytes")
    check_seed(seed)
    features = features or HashedNgrams()
    rules = [parse_filter(f) for f in filters]
    if scorer_class.orders_required is not None and features.orders != scorer_class.orders_required:
        raise InvalidParameterError(f"method={method!r} needs n-gram orders {scorer_class.orders_required}; got "
                                    f"{features.orders}.")
    target, raw = list(map(Path, target)), list(map(Path, raw))
    if not target or not raw:
        raise InvalidParameterError("give at least one target file and one raw file.")
    for p in [*target, *raw]:
        if not p.exists():
            raise InputFormatError(f"{p}: no such file.")
    out = check_selection_outputs(out, [*target, *raw])
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
        target_groups = [str(r.get(quota_field)) for s in iter_shards(target) for r in records(s) if isinstance(r, dict)]
    timings["read_target"] = time.perf_counter() - clock

    # pass 1: hash every raw shard that an earlier run did not finish
    clock = time.perf_counter()
    shard_files: list[tuple[Path, str]] = []
    reused = 0
    runner = make_executor(executor, n_jobs)
    try:
        bar = progress_bar(None, "hashing shards", show_progress, unit="shard")
        kept: dict | None = {}  # the shards read, for the write pass, while they fit KEEP_RAW_BYTES
        kept_bytes = 0
        try:
            for shard in iter_shards(raw, shard_bytes, on_error, losses=losses):
                if kept is not None:
                    kept_bytes += len(shard.blob) if shard.blob is not None else KEEP_RAW_BYTES + 1
                    if kept_bytes > KEEP_RAW_BYTES:
                        kept = None
                    else:
                        kept[shard.index] = shard
                shard_file = work / f"shard-{shard.index:06d}.npz"
                shard_files.append((shard_file, shard.path))
                if shard_file.exists() and (not rules or _has_statistics(shard_file)):
                    reused += 1
                else:
                    runner.submit(_hash_job, (shard, str(shard_file), features, text_field, group_field, strict, on_error,
                                              bool(rules)))
                bar.update(1)
            runner.drain()
        finally:
            bar.close()
        timings["hash_raw"] = time.perf_counter() - clock

        # pass 2: scores from the cached n-grams, shard by shard on the executor
        clock = time.perf_counter()
        documents = missing_text = unreadable = 0
        for shard_file, _ in shard_files:
            with np.load(shard_file) as shard:
                resampler.add_raw_counts(shard["counts"])
                documents += len(shard["tokens"])
                missing_text += int(shard["missing"])
                unreadable += int(shard["errors"])
        if not documents:
            raise InputFormatError(_empty_pool(raw, text_field, missing_text, unreadable, losses))
        scorer = scorer_class.shard_scorer(resampler, target_batch, shard_files, features, classifier_raw_docs)
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
        chosen = resample(scores, k=k, sampling=sampling, seed=seed, groups=labels if quotas else None, quotas=quotas)
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
    _write_selection(out, raw, shard_files, shard_of, places, chosen, scores, shard_bytes, on_error, kept)
    del kept
    timings["write"] = time.perf_counter() - clock
    by_label = {}
    if group_field:
        values, counts = np.unique(labels[chosen], return_counts=True)
        by_label = {label_names[v]: c for v, c in zip(values.tolist(), counts.tolist())}
    report = SelectionReport(method, len(chosen), len(scores), eligible, missing, errors,
                             [loss.to_dict() for loss in losses], estimated_loss(losses),
                             kl_reduction(resampler.target_counts_, resampler.raw_counts_, selected_counts), by_label,
                             timings, len(shard_files), reused)
    atomic_write_text(report_path(out), json.dumps(report.to_dict(), indent=1))
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


def _proportional_quotas(groups: list[str] | None, k: int) -> dict:
    if not groups:
        raise InvalidParameterError("quota_field is not in the target records: give quotas explicitly.")
    values, counts = np.unique(np.array(groups), return_counts=True)
    share = counts / counts.sum() * k
    quota = np.floor(share).astype(int)
    quota[np.argsort(-(share - quota))[: k - quota.sum()]] += 1  # largest remainders
    return dict(zip(values.tolist(), quota.tolist()))


def _empty_pool(raw: list[Path], text_field: str, missing: int, unreadable: int, losses: list[Loss]) -> str:
    """Why the raw pool holds no document to select, named."""
    names = ", ".join(map(str, raw[:3])) + (", ..." if len(raw) > 3 else "")
    reasons = []
    if missing:
        fields: set = set()
        for shard in iter_shards(raw[:1]):
            fields.update(k for r in records(shard) if isinstance(r, dict) for k in r)
            break
        reasons.append(f"{missing} records have no text field {text_field!r} (fields seen: "
                       f"{', '.join(sorted(map(str, fields))[:10]) or 'none'}); pass --text-field naming it")
    if unreadable:
        reasons.append(f"{unreadable} records were unreadable and skipped")
    for loss in losses:
        reasons.append(f"{loss.path} is damaged after line {loss.after_line} ({loss.reason})")
    return (f"the raw pool ({names}) has no document to select: "
            + ("; ".join(reasons) if reasons else "the files hold no records") + ".")


def _write_selection(out: Path, raw: Sequence[Path], shard_files, shard_of, places, chosen, scores,
                     shard_bytes: int, on_error: str, kept: dict | None = None) -> None:
    picks = np.bincount(chosen, minlength=len(scores)) if len(chosen) else np.zeros(len(scores), dtype=np.int64)
    wanted: dict[int, list[tuple[int, int, dict]]] = {}
    for i in np.flatnonzero(picks).tolist():
        wanted.setdefault(int(shard_of[i]), []).append((int(places[i]), int(picks[i]), {"salience_score": float(scores[i])}))
    write_records(out, raw, wanted, shard_bytes, on_error, kept)


