"""Where a sharded index's shards live and how they are made: shard holders (in this process,
or a Ray actor that loads its shard memory-mapped), routing by id hash, the jobs that build a
shard from its routed documents, and the ``shards.json`` manifest
(:mod:`salience.search.shards` has the format and the index)."""

from __future__ import annotations

import json
import os
import pickle
import time
import zlib
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from salience.core.scores import Scores
from salience.exceptions import CorruptIndexError, InvalidParameterError
from salience.io.files import atomic_write_text
from salience.parallel import progress_bar
from salience.search.formats import SHARDED_FORMAT, SHARDS_MANIFEST, is_sharded_folder

__all__ = ["shard_of", "is_sharded_folder", "LocalShard", "ShardServer", "RayShard", "is_unavailable", "build_shard",
           "route_documents", "read_manifest", "write_manifest", "parent_of_shard", "check_shards_alike", "merge_top_k",
           "FORMAT", "MANIFEST"]

FORMAT = SHARDED_FORMAT
FORMAT_VERSION = 1
MANIFEST = SHARDS_MANIFEST


def shard_of(doc_id: str, n_shards: int) -> int:
    """The shard a document id is routed to (CRC-32 of its UTF-8 bytes, modulo ``n_shards``)."""
    return zlib.crc32(str(doc_id).encode("utf-8")) % n_shards


# ---- shard holders: in this process, or a Ray actor --------------------------------------
class LocalShard:
    """A shard held in this process; ``submit`` computes at once."""

    def __init__(self, index):
        self.index = index

    def call(self, method: str, *args, **kwargs):
        return getattr(self.index, method)(*args, **kwargs)

    def submit(self, method: str, *args, **kwargs):
        return self.call(method, *args, **kwargs)

    def result(self, pending):
        return pending


class ShardServer:
    """What a Ray actor holds: one shard, loaded memory-mapped from its folder."""

    def __init__(self, path: str, verify: bool = True):
        from salience.search.bm25 import BM25

        self.index = BM25.load(path, verify=verify)

    def call(self, method: str, *args, **kwargs):
        return getattr(self.index, method)(*args, **kwargs)

    def pid(self) -> int:
        return os.getpid()


class RayShard:
    """A shard held by a Ray actor; ``submit`` returns a reference, ``result`` waits for it."""

    def __init__(self, actor, timeout: float | None):
        self.actor, self.timeout = actor, timeout

    def call(self, method: str, *args, **kwargs):
        return self.result(self.submit(method, *args, **kwargs))

    def submit(self, method: str, *args, **kwargs):
        return self.actor.call.remote(method, *args, **kwargs)

    def result(self, pending):
        import ray

        return ray.get(pending, timeout=self.timeout)


def is_unavailable(err: BaseException) -> bool:
    """Whether an error means the shard's holder is gone (not a bad request)."""
    name = type(err).__name__
    return name in ("RayActorError", "ActorDiedError", "ActorUnavailableError", "GetTimeoutError",
                    "WorkerCrashedError", "NodeDiedError", "OwnerDiedError", "ObjectLostError")


# ---- building ---------------------------------------------------------------------------
def build_shard(job: tuple) -> Any:
    """One shard from its routed documents: saved to ``out`` (returns its document count), built
    in bounded memory (``memory_mb``, :meth:`BM25.build`), or returned, built in memory."""
    part, out, params, *rest = job
    from salience.search.bm25 import BM25

    if out is None:
        docs = part if isinstance(part, list) else list(read_part(Path(part)))
        index = BM25(**params)
        return index.fit(docs) if docs else index
    from salience.search import bulk, store

    docs = part if isinstance(part, list) else read_part(Path(part))
    memory_mb = rest[0] if rest else 1024
    try:
        # written, not opened: opening would read the shard's stored documents, past the budget
        folder = bulk.build(BM25(**params), docs, out, memory_mb=memory_mb)
        return int(store.read_manifest(folder)[1]["n_docs"])
    except InvalidParameterError as err:
        if "empty corpus" in str(err):
            raise InvalidParameterError(f"shard {Path(out).name} got no documents: use fewer shards.") from None
        raise


def write_part(fh, doc) -> None:
    pickle.dump(doc, fh, protocol=pickle.HIGHEST_PROTOCOL)


def read_part(path: Path):
    with open(path, "rb") as fh:
        while True:
            try:
                yield pickle.load(fh)
            except EOFError:
                return


def route_documents(documents: Iterable, n_shards: int, parts: list, show_progress: bool) -> list[int]:
    """Send each document to its shard's part (a list or an open file); the count per shard.
    A repeated id routes to the same shard, whose index refuses it: nothing is remembered here."""
    counts = [0] * n_shards
    with progress_bar(None, "routing", show_progress, unit="doc") as bar:
        for doc in documents:
            s = shard_of(doc.id, n_shards)
            part = parts[s]
            part.append(doc) if isinstance(part, list) else write_part(part, doc)
            counts[s] += 1
            bar.update(1)
    return counts


def jsonable_params(params: dict) -> dict:
    out = dict(params)
    tokenizer = out.get("tokenizer")
    if tokenizer is not None and not isinstance(tokenizer, dict):
        out["tokenizer"] = tokenizer.get_config()
    return out


def write_manifest(folder: Path, n_shards: int, params: dict, counts: list[int]) -> None:
    body = {"format": FORMAT, "version": FORMAT_VERSION, "n_shards": n_shards, "routing": "crc32",
            "shards": [f"shard-{s:03d}" for s in range(n_shards)], "documents": counts,
            "params": jsonable_params(params), "created": time.time()}
    atomic_write_text(folder / MANIFEST, json.dumps(body, indent=1, ensure_ascii=False) + "\n")


def parent_of_shard(path: str | os.PathLike) -> tuple[Path, int, int] | None:
    """(sharded index folder, shard number, number of shards) when ``path`` is one shard of a
    sharded index (its parent's manifest lists it), else None."""
    path = Path(path).resolve()
    try:
        body = json.loads((path.parent / MANIFEST).read_text(encoding="utf-8"))
        names = list(body["shards"]) if body.get("format") == FORMAT else []
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return (path.parent, names.index(path.name), len(names)) if path.name in names else None


def read_manifest(path: Path) -> dict:
    manifest = path / MANIFEST
    if not manifest.is_file():
        raise CorruptIndexError(f"{path}: no {MANIFEST}: not a sharded index.")
    try:
        body = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CorruptIndexError(f"{manifest}: unreadable ({err}).") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise CorruptIndexError(f"{manifest}: not a {FORMAT} manifest.")
    if body.get("version") != FORMAT_VERSION:
        raise CorruptIndexError(f"{manifest}: format version {body.get('version')!r}; this salience reads {FORMAT_VERSION}.")
    params = dict(body.get("params") or {})
    if isinstance(params.get("tokenizer"), dict):
        from salience.text.tokenize import Tokenizer

        params["tokenizer"] = Tokenizer.from_config(params["tokenizer"])
    body["params"] = params
    return body


def check_shards_alike(path: Path, manifest: dict, shard_params: list[dict]) -> None:
    """Every shard built as the manifest says (scoring parameters, fields, tokenizer): shards of
    different analyses would score against statistics that do not add up."""
    expected = jsonable_params(manifest["params"])
    for name, params in zip(manifest["shards"], shard_params):
        found = jsonable_params(params)
        for key in sorted(set(expected) | set(found)):
            if key in expected and expected.get(key) != found.get(key):
                raise CorruptIndexError(f"{path / name}: built with {key}={found.get(key)!r}, the sharded index with "
                                        f"{key}={expected.get(key)!r}: its shards must be built alike.")


def merge_top_k(answers: list[list[Scores]], n_queries: int, k: int) -> list[Scores]:
    """The ``k`` best of every query over the shards' own top ``k`` lists, in one sort: each
    shard's lists padded to ``k`` columns with -inf, side by side, sorted per row (stable:
    equal scores keep shard order)."""
    width = len(answers) * k
    values = np.full((n_queries, width), -np.inf)
    ids = np.empty((n_queries, width), dtype=object)
    for s, lists in enumerate(answers):
        for q, result in enumerate(lists):
            m = len(result)
            values[q, s * k : s * k + m] = result.values
            ids[q, s * k : s * k + m] = result.ids
    order = np.argsort(-values, axis=1, kind="stable")[:, :k]
    top_values = np.take_along_axis(values, order, axis=1)
    top_ids = np.take_along_axis(ids, order, axis=1)
    counts = np.isfinite(top_values).sum(axis=1).tolist()
    return Scores.unchecked_rows(top_values, top_ids.tolist(), counts)
