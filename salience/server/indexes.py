"""The indexes a service serves: each one's committed state (what readers see) and the lock
its writers take (:class:`ServedIndex`), BM25 or dense alike."""

import os
import threading
from pathlib import Path
from typing import Any, Callable

__all__ = ["ServedIndex", "explained"]


class ServedIndex:
    """One saved index: the committed state readers use, and a lock for its writers."""

    def __init__(self, path: str | os.PathLike):
        from salience.io.files import sweep_stale_temporaries
        from salience.search.dense_store import is_dense_folder

        self.path = Path(path).resolve()
        self.name = self.path.name
        self.kind = "dense" if is_dense_folder(self.path) else "bm25"
        sweep_stale_temporaries(self.path.parent, self.name)  # a killed full save's leftovers
        # (committed index, generation), replaced as one object so a reader takes both at once
        self.snapshot = (self._load(), 0)
        if self.kind == "dense":  # its encoder loads now, before the service reports ready
            self.reader.warm_up()
        self._sweep_inside()
        self.lock = threading.Lock()
        self._writer = None  # a copy with changes not yet committed (add/delete with commit=false)

    def _load(self):
        from salience.search import BM25, Dense

        return Dense.load(self.path) if self.kind == "dense" else BM25.load(self.path)

    @property
    def reader(self):
        return self.snapshot[0]

    @property
    def generation(self) -> int:
        return self.snapshot[1]

    def _sweep_inside(self) -> None:
        """What killed commits left inside the folder (temporaries, unlisted segments)."""
        self.reader.sweep_leftovers()

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind, "documents": self.reader.n_docs, "generation": self.generation,
                "pending": self._writer is not None}

    def write(self, change: Callable[[Any], Any], *, commit: bool = True) -> dict:
        """Apply ``change`` to the writer's copy; with ``commit``, commit it and publish it to
        readers. A failure drops the copy: the next write starts again from the committed state."""
        with self.lock:
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
        with self.lock:
            if self._writer is not None:
                try:
                    self._publish(self._writer, self._writer.commit)
                except BaseException:
                    self._writer = None
                    raise
            return self._status()

    def merge(self) -> dict:
        with self.lock:
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
        self.snapshot, self._writer = (writer, self.generation + 1), None  # that copy is never changed again


def explained(engine, query: str, doc_id: str, document: dict) -> tuple[dict, dict]:
    """BM25's term contributions to ``doc_id``'s score, and for each indexed text field of
    ``document`` the character spans of the words whose terms contributed."""
    explanation = engine.explain(query, doc_id).to_dict()
    terms = {t["term"] for t in explanation["terms"] if t["contribution"] > 0}
    highlights = {field: [[start, end] for start, end, term in engine.tokenizer.spans(value) if term in terms]
                  for field, value in document.items() if field in engine.fields and isinstance(value, str)}
    return explanation, highlights
