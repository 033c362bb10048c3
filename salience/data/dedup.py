"""Exact and near-duplicate removal.

* Exact: documents whose sequence of lower-case words (punctuation and spacing ignored) has
  the same 64-bit hash; the first is kept.
* Near (MinHash LSH; Broder, 1997): each document's word 5-gram shingles are hashed; its
  signature is the minimum of ``num_perm`` independent 64-bit hash functions over them; the
  signature is cut into ``bands`` x ``rows`` with the bands and rows chosen for ``threshold``,
  documents sharing a band are candidates, a candidate pair whose signatures agree on at least
  ``threshold`` of their positions (the MinHash estimate of Jaccard similarity) is a duplicate,
  and each connected group keeps its first document.
* Semantic (SemDeDup; :mod:`salience.data.semantic_dedup`): the documents left are embedded,
  clustered, and within a cluster a document whose cosine similarity to an earlier one (in
  SemDeDup's keep order) reaches ``similarity`` is dropped.

:func:`dedup_files` streams jsonl / jsonl.gz / parquet files in shards with the same executors
as selection; memory is 8 bytes per document (exact) or ``bands`` x 8 bytes (near), plus the
signatures on disk (``num_perm`` x 8 bytes per document).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from salience.core.checks import check_k
from salience.core.graph import DisjointSets
from salience.core.scores import Scores
from salience.text.features import HashedNgrams
from salience.exceptions import InvalidParameterError
from salience.io.files import atomic_write_text
from salience.io.shards import (SHARD_LAYOUT, atomic_save, estimated_loss, iter_shards, parse_shard, prepare_work_dir, remove_work_dir, write_records)
from salience.parallel import make_executor, progress_bar
from salience.text.hashing import mix64 as _mix

__all__ = ["exact_hashes", "minhash_signatures", "lsh_params", "near_duplicate_groups", "dedup_texts", "dedup_files",
           "DedupReport"]

_SHINGLE_PAIR = np.uint64(0x9E3779B97F4A7C15)


#: texts hashed at once: each text's hashes are its own, so blocks bound the token arrays'
#: memory (about 50 bytes per token) without changing a value
TEXTS_PER_BLOCK = 2048


def _in_blocks(function, texts: Sequence[str], *args) -> np.ndarray | None:
    """``function`` over blocks of TEXTS_PER_BLOCK texts, concatenated; None when one block does."""
    if len(texts) <= TEXTS_PER_BLOCK:
        return None
    texts = list(texts)
    return np.concatenate([function(texts[i : i + TEXTS_PER_BLOCK], *args)
                           for i in range(0, len(texts), TEXTS_PER_BLOCK)])


def exact_hashes(texts: Sequence[str]) -> np.ndarray:
    """64-bit hash of each text's sequence of lower-case words (case, punctuation and spacing
    ignored): an order-sensitive sum of the mixed word hashes and their positions."""
    blocked = _in_blocks(exact_hashes, texts)
    if blocked is not None:
        return blocked
    hashes, doc = HashedNgrams(orders=(1,)).token_hashes(list(texts), punctuation=False)
    n = len(texts)
    counts = np.bincount(doc, minlength=n)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    position = (np.arange(len(hashes)) - first[doc]).astype(np.uint64)
    with np.errstate(over="ignore"):
        keyed = _mix(hashes * _SHINGLE_PAIR + position)
        total = np.zeros(n, dtype=np.uint64)
        np.add.at(total, doc, keyed)  # wraps modulo 2**64
        return _mix(total + counts.astype(np.uint64))


def minhash_signatures(texts: Sequence[str], num_perm: int = 128, shingle: int = 5, seed: int = 1) -> np.ndarray:
    """(len(texts), num_perm) uint64 MinHash signatures over word ``shingle``-grams (a text
    shorter than that is one shingle of all its words; an empty text gets all-ones)."""
    num_perm = check_num_perm(num_perm)
    blocked = _in_blocks(minhash_signatures, texts, num_perm, shingle, seed)
    if blocked is not None:
        return blocked
    words = HashedNgrams(orders=(1,))
    hashes, doc = words.token_hashes(list(texts), punctuation=False)
    n = len(texts)
    counts = np.bincount(doc, minlength=n)
    # shingle hashes: combine `shingle` consecutive token hashes within a document
    if len(hashes) >= shingle:
        m = len(hashes) - shingle + 1
        combined = hashes[:m].copy()
        with np.errstate(over="ignore"):
            for offset in range(1, shingle):
                combined = _mix(combined * _SHINGLE_PAIR + hashes[offset : offset + m])
        same = doc[:m] == doc[shingle - 1 :]
        shingles, owner = combined[same], doc[:m][same]
    else:
        shingles, owner = np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    # short documents: one shingle of all their tokens
    short = np.flatnonzero((counts > 0) & (counts < shingle))
    if len(short):
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        extra = np.empty(len(short), dtype=np.uint64)
        with np.errstate(over="ignore"):
            for j, d in enumerate(short.tolist()):
                h = np.zeros(1, dtype=np.uint64)
                for t in hashes[starts[d] : starts[d] + counts[d]]:
                    h = _mix(h * _SHINGLE_PAIR + t)
                extra[j] = h[0]
        shingles, owner = np.concatenate([shingles, extra]), np.concatenate([owner, short])
        order = np.argsort(owner, kind="stable")
        shingles, owner = shingles[order], owner[order]
    rng = np.random.default_rng(seed)
    salts = rng.integers(0, 2**63, size=num_perm, dtype=np.int64).astype(np.uint64)
    multipliers = rng.integers(0, 2**63, size=num_perm, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1)
    signature = np.full((n, num_perm), np.iinfo(np.uint64).max, dtype=np.uint64)
    if len(shingles):
        present = np.unique(owner)
        bounds = np.append(np.searchsorted(owner, present), len(owner))
        step = max(1, (1 << 22) // num_perm)  # shingles per chunk: about 32 MB of hash values
        lo = 0
        while lo < len(present):
            hi = min(len(present), max(lo + 1, int(np.searchsorted(bounds, bounds[lo] + step, side="right")) - 1))
            a, b = bounds[lo], bounds[hi]
            with np.errstate(over="ignore"):
                # h_i(x) = a_i x + b_i (mod 2**64), a_i odd: shingle hashes are already mixed,
                # and a multiply-add per permutation is 4x cheaper than a full mixer
                values = shingles[a:b, None] * multipliers[None, :] + salts[None, :]
            signature[present[lo:hi]] = np.minimum.reduceat(values, bounds[lo:hi] - a, axis=0)
            lo = hi
    return signature


def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows) with bands x rows <= num_perm minimising the false positive and false
    negative probability mass around ``threshold`` (as datasketch chooses them)."""
    check_num_perm(num_perm)
    if not 0.0 < threshold < 1.0:
        raise InvalidParameterError(f"threshold must be in (0, 1); got {threshold}.")
    xs = np.linspace(0.0, 1.0, 201)
    best, best_error = (1, num_perm), np.inf
    for b in range(1, num_perm + 1):
        r = num_perm // b
        p = 1.0 - (1.0 - xs**r) ** b
        false_positive = np.trapezoid(np.where(xs < threshold, p, 0.0), xs)
        false_negative = np.trapezoid(np.where(xs >= threshold, 1.0 - p, 0.0), xs)
        if false_positive + false_negative < best_error:
            best, best_error = (b, r), false_positive + false_negative
    return best


def check_num_perm(num_perm: object) -> int:
    """``num_perm`` must be a positive integer (the number of MinHash functions)."""
    return check_k(num_perm, "num_perm")


def band_hashes(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """(n, bands) 64-bit hash of each band of each signature."""
    out = np.zeros((len(signatures), bands), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for band in range(bands):
            h = np.full(len(signatures), np.uint64(band + 1))
            for row in range(rows):
                h = _mix(h * _SHINGLE_PAIR + signatures[:, band * rows + row])
            out[:, band] = h
    return out


def near_duplicate_groups(bands: np.ndarray, agree, threshold: float) -> np.ndarray:
    """Group representative (smallest index) of each document: documents sharing a band hash
    are candidates; ``agree(i, j)`` (share of equal signature positions) >= ``threshold`` links them."""
    sets = DisjointSets(len(bands))
    checked = set()
    for band in range(bands.shape[1]):
        column = bands[:, band]
        order = np.argsort(column, kind="stable")
        ordered = column[order]
        same = np.flatnonzero(ordered[1:] == ordered[:-1])
        for j in same.tolist():
            a, b = int(order[j]), int(order[j + 1])
            a, b = min(a, b), max(a, b)
            if (a, b) in checked:
                continue
            checked.add((a, b))
            if agree(a, b) >= threshold:
                ra, rb = sets.find(a), sets.find(b)
                sets.union(max(ra, rb), min(ra, rb))  # the smallest index represents its group
    return np.array(sets.roots(), dtype=np.int64)


def dedup_texts(texts: Sequence[str], *, near: bool = False, threshold: float = 0.8, num_perm: int = 128,
                semantic: bool = False, encoder: Any = None, similarity: float = 0.95, clusters: int | None = None,
                keep_order: str = "hard", center: bool = True, ids: Sequence | None = None) -> Scores:
    """The texts to keep, one of each duplicate group, in order, as :class:`~salience.Scores`
    whose value is how many texts the kept one stands for (itself and its duplicates). Ids are
    positions unless ``ids`` are given. Exact and near duplicates keep the first text;
    ``semantic`` groups keep the one SemDeDup's ``keep_order`` puts first (``encoder``: a
    model name or folder, a static encoder's too, or a callable; default the bundled MiniLM).

    >>> kept = dedup_texts(["A cat sat.", "a CAT sat", "A dog ran."])
    >>> kept.ids, kept.values.tolist()
    ([0, 2], [2.0, 1.0])
    """
    if ids is not None and len(ids) != len(texts):
        raise InvalidParameterError(f"ids has {len(ids)} entries for {len(texts)} texts; give one id per text.")
    hashes = exact_hashes(texts)
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    representative = first[inverse.reshape(-1)]  # the first text with the same words
    if near:
        signatures = minhash_signatures(texts, num_perm)
        b, r = lsh_params(threshold, num_perm)
        groups = near_duplicate_groups(band_hashes(signatures, b, r),
                                       lambda i, j: float(np.mean(signatures[i] == signatures[j])), threshold)
        representative = groups[representative]  # the near-duplicate group of the exact copy kept
    if semantic:
        representative = _semantic(texts, representative, encoder, similarity, clusters, keep_order, center)
    keep = np.flatnonzero(representative == np.arange(len(texts)))
    sizes = np.bincount(representative, minlength=len(texts))[keep].astype(np.float64)
    return Scores(sizes, ids=keep.tolist() if ids is None else [ids[i] for i in keep.tolist()])


def _semantic(texts: Sequence[str], representative: np.ndarray, encoder: Any, similarity: float,
              clusters: int | None, keep_order: str, center: bool) -> np.ndarray:
    """``representative`` with the kept texts' semantic duplicates pointed at their group's kept text."""
    from salience.data.semantic_dedup import check_similarity, semantic_duplicate_groups
    from salience.models.encoders import encode_normalized, get_encoder

    check_similarity(similarity)
    kept = np.flatnonzero(representative == np.arange(len(texts)))
    vectors = encode_normalized(get_encoder(encoder), [texts[i] for i in kept.tolist()])
    groups = kept[semantic_duplicate_groups(vectors, similarity=similarity, clusters=clusters,
                                            keep_order=keep_order, center=center)]
    position = np.zeros(len(texts), dtype=np.int64)
    position[kept] = np.arange(len(kept))
    return groups[position[representative]]


@dataclass
class DedupReport:
    documents: int
    kept: int
    exact_duplicates: int
    near_duplicates: int
    skipped_no_text: int = 0
    skipped_errors: int = 0
    truncated_files: list = field(default_factory=list)
    lost_records_estimated: int | None = 0  # None: some loss cannot be estimated
    seconds: dict = field(default_factory=dict)
    semantic_duplicates: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _dedup_job(args) -> dict:
    shard, shard_file, text_field, near, num_perm, encoder, strict, on_error = args
    texts, _, numbers, places, missing, errors = parse_shard(shard, text_field, None, strict, on_error)
    result = {"exact": exact_hashes(texts), "places": np.array(places, dtype=np.int64), "missing": missing, "errors": errors}
    if near:
        result["signatures"] = minhash_signatures(texts, num_perm)
    if encoder is not _NO_ENCODER:
        from salience.models.encoders import encode_normalized, get_encoder

        result["vectors"] = encode_normalized(get_encoder(encoder), texts).astype(np.float32)
    atomic_save(Path(shard_file), **result)
    return {}


_NO_ENCODER = "-"  # a shard job without embeddings


def dedup_files(inputs: Sequence[str | Path], out: str | Path, *, near: bool = False, threshold: float = 0.8,
                num_perm: int = 128, semantic: bool = False, encoder: Any = None, similarity: float = 0.95,
                clusters: int | None = None, keep_order: str = "hard", center: bool = True, text_field: str = "text", n_jobs: int = 2,
                executor="local", shard_bytes: int = 8 << 20, work_dir: str | Path | None = None,
                strict: bool = False, on_error: str = "raise", show_progress: bool = False) -> DedupReport:
    """Write the records of ``inputs`` without exact (with ``near``, near; with ``semantic``,
    semantic) duplicates to ``out``. Semantic deduplication holds every document's embedding
    in memory (4 bytes per dimension) while it decides."""
    from salience.data.pipeline import check_selection_outputs, report_path

    inputs = [Path(p) for p in inputs]
    if not inputs:
        raise InvalidParameterError("give at least one input file.")
    check_num_perm(num_perm)
    shard_bytes = check_k(shard_bytes, "shard_bytes")
    if near:
        lsh_params(threshold, num_perm)  # validates the threshold before any work
    if semantic:
        from salience.data.semantic_dedup import KEEP_ORDERS, check_similarity

        check_similarity(similarity)
        if keep_order not in KEEP_ORDERS:
            raise InvalidParameterError(f"keep_order={keep_order!r} is not one of {', '.join(KEEP_ORDERS)}.")
        if encoder is not None and not isinstance(encoder, str):
            raise InvalidParameterError("dedup_files embeds in worker processes: give the encoder as a model name or "
                                        "folder.")
    job_encoder = (encoder or None) if semantic else _NO_ENCODER
    out = check_selection_outputs(out, inputs)
    work = Path(work_dir) if work_dir else out.with_name(out.name + ".work")
    prepare_work_dir(work, {"near": near, "num_perm": num_perm, "text_field": text_field, "shard_bytes": shard_bytes,
                            "shard_layout": SHARD_LAYOUT, "strict": strict, "on_error": on_error, "inputs": inputs,
                            "encoder": job_encoder})  # dedup keeps no skip counts: all of it keys the cache
    timings = {}
    clock = time.perf_counter()
    shard_files = []
    runner = make_executor(executor, n_jobs)
    bar = progress_bar(None, "hashing shards", show_progress, unit="shard")
    losses: list = []
    try:
        for shard in iter_shards(inputs, shard_bytes, on_error, losses=losses):
            shard_file = work / f"dedup-{shard.index:06d}.npz"
            shard_files.append(shard_file)
            if not shard_file.exists():
                runner.submit(_dedup_job, (shard, str(shard_file), text_field, near, num_perm, job_encoder, strict,
                                           on_error))
            bar.update(1)
    finally:
        runner.close()
        bar.close()
    timings["hash"] = time.perf_counter() - clock
    clock = time.perf_counter()
    exact, places, shard_of, signatures, vectors = [], [], [], [], []
    missing = errors = 0
    for s, shard_file in enumerate(shard_files):
        with np.load(shard_file) as shard:
            exact.append(shard["exact"])
            places.append(shard["places"])
            shard_of.append(np.full(len(shard["exact"]), s))
            missing += int(shard["missing"])
            errors += int(shard["errors"])
            if near:
                signatures.append(shard["signatures"])
            if semantic:
                vectors.append(shard["vectors"])
    exact = np.concatenate(exact) if exact else np.zeros(0, dtype=np.uint64)
    places = np.concatenate(places) if places else np.zeros(0, dtype=np.int64)
    shard_of = np.concatenate(shard_of) if shard_of else np.zeros(0, dtype=np.int64)
    _, first = np.unique(exact, return_index=True)
    keep = np.zeros(len(exact), dtype=bool)
    keep[first] = True
    exact_removed = int(len(exact) - keep.sum())
    near_removed = 0
    if near and len(exact):
        sig = np.concatenate(signatures)
        b, r = lsh_params(threshold, num_perm)
        groups = near_duplicate_groups(band_hashes(sig, b, r), lambda i, j: float(np.mean(sig[i] == sig[j])), threshold)
        before = int(keep.sum())
        keep &= groups == np.arange(len(exact))
        near_removed = before - int(keep.sum())
    semantic_removed = 0
    if semantic and len(exact):
        from salience.data.semantic_dedup import semantic_duplicate_groups

        left = np.flatnonzero(keep)
        groups = semantic_duplicate_groups(np.concatenate(vectors)[left], similarity=similarity, clusters=clusters,
                                           keep_order=keep_order, center=center)
        keep[left[groups != np.arange(len(left))]] = False
        semantic_removed = len(left) - int(keep.sum())
    timings["decide"] = time.perf_counter() - clock
    clock = time.perf_counter()
    wanted: dict[int, list] = {}
    for i in np.flatnonzero(keep).tolist():
        wanted.setdefault(int(shard_of[i]), []).append((int(places[i]), 1, {}))
    write_records(out, inputs, wanted, shard_bytes, on_error)
    timings["write"] = time.perf_counter() - clock
    remove_work_dir(work)
    report = DedupReport(len(exact), int(keep.sum()), exact_removed, near_removed, missing, errors,
                         [loss.to_dict() for loss in losses], estimated_loss(losses), timings,
                         semantic_duplicates=semantic_removed)
    atomic_write_text(report_path(out), json.dumps(report.to_dict(), indent=1))
    return report
