"""Quality of a selection: precision and recall against a label, and DSIR's KL reduction."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from salience.data.dsir import kl_reduction
from salience.text.features import HashedNgrams
from salience.io.shards import iter_shards, parse_shard

__all__ = ["selection_report"]


def _stream(paths, features: HashedNgrams, text_field: str, label_field: str | None, min_tokens: int = 0):
    """(bucket counts of the documents with >= min_tokens tokens, their labels, documents seen)."""
    counts = np.zeros(features.buckets)
    labels: list[str] = []
    seen = 0
    for shard in iter_shards(paths):
        texts, shard_labels, _, _, _, _ = parse_shard(shard, text_field, label_field, False, "raise")
        batch = features.transform(texts)
        keep = batch.tokens >= min_tokens
        seen += len(texts)
        counts += np.bincount(batch.bucket[keep[batch.doc]], minlength=features.buckets)
        labels.extend(label for label, k in zip(shard_labels, keep.tolist()) if k)
    return counts, labels, seen


def selection_report(selected: str | Path, target: Sequence[str | Path], raw: Sequence[str | Path], *,
                     features: HashedNgrams | None = None, text_field: str = "text", label_field: str | None = None,
                     target_label: str | None = None, min_tokens: int = 0) -> dict:
    """``selected``, ``pool`` and, with a label, ``precision`` (share of the selection with the
    target label), ``recall`` (share of the pool's target-label documents that were selected,
    by count) and ``kl_reduction`` (KL(target || pool) - KL(target || selection))."""
    features = features or HashedNgrams()
    target_counts, _, _ = _stream(target, features, text_field, None)
    raw_counts, raw_labels, seen = _stream(raw, features, text_field, label_field, min_tokens)
    selected_counts, selected_labels, n_selected = _stream([selected], features, text_field, label_field)
    result = {"selected": n_selected, "pool": len(raw_labels), "raw_documents": seen,
              "kl_reduction": kl_reduction(target_counts, raw_counts, selected_counts)}
    if label_field:
        hits = sum(label == target_label for label in selected_labels)
        relevant = sum(label == target_label for label in raw_labels)
        result.update({"precision": hits / n_selected if n_selected else 0.0,
                       "recall": hits / relevant if relevant else 0.0, "target_label_in_pool": relevant})
    return result
