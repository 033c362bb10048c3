"""The indexes a service serves: each one's committed state (what readers see) and the locks
its writers take (:class:`ServedIndex`), BM25, dense or sharded.

Several processes may serve one folder (``salience serve --workers N``): a commit or merge
holds an exclusive lock on ``write.lock`` in the folder, and writes the commit's number to
``generation.json`` after the manifest (the commit point); a process that loads the folder
holds the shared lock, so it waits for a commit in progress and reads the last one whole.
Each process watches the manifest and generation file and reopens the index when another
process committed (within ``watch_s``), and a writer first catches up with the folder, so no
commit is lost and every process reports the same generation for the same state."""

import fcntl
import json
import logging
import os
import threading
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable

__all__ = ["ServedIndex", "FolderSync", "explained"]

log = logging.getLogger("salience.server")


class FolderSync:
    """The folder's lock (``write.lock``, shared to read, exclusive to commit) and generation
    (``generation.json``); a folder that cannot be written is read without locking."""

    def __init__(self, path: Path, manifest: str):
        self.manifest = path / manifest
        self.lock_path = path / "write.lock"
        self.generation_path = path / "generation.json"

    @contextmanager
    def _locked(self, mode: int):
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:  # a read-only folder: nobody commits to it
            yield
            return
        try:
            fcntl.flock(fd, mode)
            yield
        finally:
            os.close(fd)  # releases the lock

    def reading(self):
        return self._locked(fcntl.LOCK_SH)

    def writing(self):
        return self._locked(fcntl.LOCK_EX)

    def stamp(self) -> tuple:
        """What changes when anyone commits: the manifest's and generation file's identity."""
        out = []
        for path in (self.manifest, self.generation_path):
            try:
                st = os.stat(path)
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append(None)
        return tuple(out)

    def generation(self) -> int:
        try:
            return int(json.loads(self.generation_path.read_text(encoding="utf-8"))["generation"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def sweep(self) -> None:
        """Remove the generation file's temporaries left by a process killed while writing it."""
        from salience.io.files import sweep_stale_temporaries

        sweep_stale_temporaries(self.generation_path.parent, self.generation_path.name)

    def set_generation(self, generation: int) -> None:
        from salience.io.files import atomic_write_text

        atomic_write_text(self.generation_path, json.dumps({"generation": generation}))


class ServedIndex:
    """One saved index: the committed state readers use, and the locks its writers take.

    ``shared``: several processes serve the folder, so every write commits (a pending change
    would live in one process only). ``watch_s``: how often the folder is checked for another
    process's commits (0: never). A sharded folder is served read-only, its shards held in
    this process or in Ray actors (``shard_executor``, ``address``)."""

    def __init__(self, path: str | os.PathLike, *, shared: bool = False, watch_s: float = 0.2,
                 shard_executor: str = "local", address: str | None = None):
        from salience.io.files import sweep_stale_temporaries
        from salience.search import index_class, index_kind

        self.path = Path(path).resolve()
        self.name = self.path.name
        self.shared = shared
        self.kind = index_kind(self.path)  # reported; what the service may do is read from the class
        self.index_class = index_class(self.path)
        self._shard_options = {"executor": shard_executor, "address": address}
        self.remote = self.index_class.holds_shards and shard_executor != "local"  # answers cross the network
        self.lock = threading.Lock()
        self._writer = None  # a copy with changes not yet committed (add/delete with commit=false)
        self.reopen_error: str | None = None  # why the last reopen of another process's commit failed
        self._sync = FolderSync(self.path, self.index_class.manifest_name)
        with self._sync.writing():  # sweeping must not race another process's commit
            sweep_stale_temporaries(self.path.parent, self.name)  # a killed full save's leftovers
            self._sync.sweep()
            self._seen = self._sync.stamp()
            # (committed index, generation), replaced as one object so a reader takes both at once
            self.snapshot = (self._load(verify=True), self._sync.generation())
            if self.index_class.writable_in_place:
                self.reader.sweep_leftovers()  # what killed commits left inside the folder
        if self.index_class.encodes_queries:  # its encoder loads now, before the service reports ready
            self.reader.warm_up()
        self._stop = threading.Event()
        if watch_s and self.index_class.writable_in_place:  # a sharded folder changes by a restart
            threading.Thread(target=self._watch, args=(watch_s,), daemon=True, name=f"watch-{self.name}").start()

    def _load(self, verify: bool = True):
        from salience.search import open_index

        return open_index(self.path, verify=verify, **self._shard_options)

    @property
    def reader(self):
        return self.snapshot[0]

    @property
    def generation(self) -> int:
        return self.snapshot[1]

    def close(self) -> None:
        self._stop.set()

    def _watch(self, every: float) -> None:
        while not self._stop.wait(every):
            if self._sync.stamp() != self._seen:
                try:
                    with self.lock:
                        self._catch_up(locked=False)
                    self.reopen_error = None
                except Exception as err:  # noqa: BLE001 - a damaged commit: keep serving the last good state
                    log.exception("reopening %s after another process's commit failed", self.path)
                    # said on /health: this process answers from an older generation than the folder's
                    self.reopen_error = (f"serving generation {self.generation}; the folder is at generation "
                                         f"{self._sync.generation()}, which could not be opened: "
                                         f"{type(err).__name__}: {err}")

    def _catch_up(self, *, locked: bool) -> None:
        """Reopen the folder if another process committed since this one last read it (holding
        ``self.lock``; ``locked``: the folder's exclusive lock is held too)."""
        if self._sync.stamp() == self._seen:
            return
        with (nullcontext() if locked else self._sync.reading()):
            stamp = self._sync.stamp()
            # only what was committed since (new segments, deletions): a reopen must not stall readers
            index = self.reader.reopen() if self.index_class.writable_in_place else self._load(verify=False)
            generation = self._sync.generation()
        if self._writer is not None:
            log.warning("%s: another process committed; changes not yet committed here are dropped", self.path)
        self.snapshot, self._seen, self._writer = (index, generation), stamp, None

    def describe(self) -> dict:
        row = {"name": self.name, "kind": self.kind, "documents": self.reader.n_docs, "generation": self.generation,
               "pending": self._writer is not None}
        problem = self.problem()
        if problem is not None:
            row["error"] = problem
        return row

    def problem(self) -> str | None:
        """Why this index is not served as the folder holds it (a failed reopen, a dead shard), or None."""
        if self.reopen_error is not None:
            return self.reopen_error
        if self.index_class.holds_shards:
            return self.reader.unreachable_shards()
        return None

    def write(self, change: Callable[[Any], Any], *, commit: bool = True) -> dict:
        """Apply ``change`` to the writer's copy; with ``commit``, commit it and publish it to
        readers. A failure drops the copy: the next write starts again from the committed state."""
        with self.lock, self._sync.writing():
            self._catch_up(locked=True)
            if self._writer is None:  # a copy of the committed state (sharing what writes never change)
                self._writer = self.reader.copy()
            try:
                result = change(self._writer)
                if commit:
                    self._publish(self._writer, self._writer.commit)
            except BaseException:
                self._writer = None
                raise
            return self._status(committed=commit, **(result or {}))

    def commit(self) -> dict:
        with self.lock, self._sync.writing():
            if self._writer is not None:
                try:
                    self._publish(self._writer, self._writer.commit)
                except BaseException:
                    self._writer = None
                    raise
            return self._status()

    def merge(self) -> dict:
        with self.lock, self._sync.writing():
            self._catch_up(locked=True)
            writer = self._writer if self._writer is not None else self.reader.copy()
            try:
                self._publish(writer, writer.merge)
            except BaseException:
                self._writer = None
                raise
            return self._status(segments=self.reader.n_segments)

    def _status(self, committed: bool = True, **extra) -> dict:
        return {"index": self.name, "committed": committed, "generation": self.generation,
                "documents": self.reader.n_docs, **extra}

    def _publish(self, writer, persist: Callable[[], Any]) -> None:
        persist()  # durable from here (the manifest replace is the commit point)
        generation = self.generation + 1
        self._sync.set_generation(generation)
        # that copy is never changed again
        self.snapshot, self._writer, self._seen = (writer, generation), None, self._sync.stamp()


def explained(engine, query: str, doc_ids: list[str], documents: list[dict]) -> list[tuple[dict, dict]]:
    """For each of ``doc_ids``: BM25's term contributions to its score, and for each indexed
    text field of its document the character spans of the words whose terms contributed."""
    out = []
    for explanation, document in zip(engine.explain_batch(query, doc_ids), documents):
        explanation = explanation.to_dict()
        terms = {t["term"] for t in explanation["terms"] if t["contribution"] > 0}
        highlights = {field: [[start, end] for start, end, _ in engine.tokenizer_.spans(value, terms)]
                      for field, value in document.items() if field in engine.fields_ and isinstance(value, str)}
        out.append((explanation, highlights))
    return out
