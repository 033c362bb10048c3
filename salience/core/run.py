"""``Run`` (subject -> Scores) and ``Qrels`` (subject -> {item: relevance}), with TREC / BEIR files."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from salience.core.scores import Scores, first_duplicate
from salience.exceptions import IdMismatchError, InputFormatError, InvalidParameterError

__all__ = ["Run", "Qrels"]


def _read_lines(path: Path, on_error: str = "raise") -> Iterator[tuple[int, str]]:
    from salience.io.files import iter_text_lines

    for lineno, line in iter_text_lines(path, on_error):
        line = line.strip()
        if line and not line.startswith("#"):
            yield lineno, line


class Run:
    """Ranked results for many subjects (queries): ``{subject_id: Scores}``.

    >>> run = Run({"q1": {"d1": 2.0, "d2": 1.0}})
    >>> run["q1"].ranked_ids()
    ['d1', 'd2']
    """

    def __init__(self, results: Mapping[Any, Scores | Mapping[Any, float]] | None = None, name: str = "run"):
        self.name = name
        self._results: dict[Any, Scores] = {}
        for subject, scores in (results or {}).items():
            self[subject] = scores

    def __setitem__(self, subject: Any, scores: Scores | Mapping[Any, float]) -> None:
        if not isinstance(scores, Scores):
            scores = Scores.from_dict(scores)
        dup = first_duplicate(scores.ids)
        if dup is not None:
            raise IdMismatchError(f"run {self.name!r}, subject {subject!r}: item {dup!r} appears twice.")
        self._results[subject] = scores

    def __getitem__(self, subject: Any) -> Scores:
        try:
            return self._results[subject]
        except KeyError:
            raise IdMismatchError(f"run {self.name!r} has no subject {subject!r}.") from None

    def __contains__(self, subject: Any) -> bool:
        return subject in self._results

    def __iter__(self) -> Iterator:
        return iter(self._results)

    def __len__(self) -> int:
        return len(self._results)

    def items(self):
        return self._results.items()

    def keys(self):
        return self._results.keys()

    def to_dict(self) -> dict[Any, dict[Any, float]]:
        return {s: sc.to_dict() for s, sc in self._results.items()}

    def __repr__(self) -> str:
        return f"Run(name={self.name!r}, subjects={len(self)})"

    # TREC run files: "qid Q0 docid rank score tag" -------------------------------------------
    @classmethod
    def read_trec(cls, path: str | Path, name: str | None = None, *, on_error: str = "raise") -> "Run":
        """Read a TREC run file (six whitespace-separated columns); ``on_error`` is the policy
        for lines of invalid UTF-8 (:func:`~salience.io.files.iter_text_lines`)."""
        path = Path(path)
        per_subject: dict[str, dict[str, float]] = {}
        for lineno, line in _read_lines(path, on_error):
            parts = line.split()
            if len(parts) != 6:
                raise InputFormatError(
                    f"{path}:{lineno}: a TREC run line needs 6 columns (qid Q0 docid rank score tag); "
                    f"got {len(parts)}: {line[:80]!r}"
                )
            qid, _, docid, _, score, _ = parts
            try:
                value = float(score)
            except ValueError:
                raise InputFormatError(f"{path}:{lineno}: score {score!r} is not a number.") from None
            if np.isnan(value):
                raise InputFormatError(f"{path}:{lineno}: score is NaN.")
            docs = per_subject.setdefault(qid, {})
            if docid in docs:
                raise InputFormatError(f"{path}:{lineno}: document {docid!r} appears twice for query {qid!r}.")
            docs[docid] = value
        return cls(per_subject, name=name or path.stem)

    def write_trec(self, path: str | Path, tag: str | None = None) -> None:
        """Write a TREC run file atomically, each subject's items in rank order. Ids and the tag
        are whitespace-separated columns there: one that is empty or holds whitespace is refused
        before anything is written."""
        from salience.io.files import atomic_write_text

        tag = check_trec_token(tag or self.name, "the run's tag")
        lines = []
        for subject, scores in self._results.items():
            check_trec_token(subject, "subject id")
            ordered = scores.sorted()
            for rank, (item, value) in enumerate(ordered, start=1):
                lines.append(f"{subject} Q0 {check_trec_token(item, f'item id (of subject {subject!r})')} {rank} "
                             f"{value!r} {tag}\n")
        atomic_write_text(path, "".join(lines))


class Qrels:
    """Relevance judgments: ``{subject_id: {item_id: grade}}`` (grade >= 1 means relevant).

    >>> q = Qrels({"q1": {"d1": 1, "d2": 0}})
    >>> q.relevant("q1")
    {'d1'}
    """

    def __init__(self, judgments: Mapping[Any, Mapping[Any, int]] | None = None, name: str = "qrels"):
        self.name = name
        self._judgments: dict[Any, dict[Any, int]] = {}
        for subject, docs in (judgments or {}).items():
            self._judgments[subject] = {d: self._grade(subject, d, g) for d, g in docs.items()}

    def _grade(self, subject: Any, item: Any, grade: Any) -> int:
        """A judgment's grade as an int: a whole number (NaN, fractions and text are refused)."""
        import math
        import numbers

        if isinstance(grade, str) and grade.strip().lstrip("+-").isdigit():
            return int(grade)
        if isinstance(grade, numbers.Real) and math.isfinite(grade) and float(grade).is_integer():
            return int(grade)
        raise InvalidParameterError(f"qrels {self.name!r}: the grade of {item!r} for {subject!r} is {grade!r}; grades "
                                    "are whole numbers (0 not relevant, 1 or more relevant).")

    def __getitem__(self, subject: Any) -> dict[Any, int]:
        try:
            return self._judgments[subject]
        except KeyError:
            raise IdMismatchError(f"qrels {self.name!r} have no subject {subject!r}.") from None

    def __contains__(self, subject: Any) -> bool:
        return subject in self._judgments

    def __iter__(self) -> Iterator:
        return iter(self._judgments)

    def __len__(self) -> int:
        return len(self._judgments)

    def items(self):
        return self._judgments.items()

    def relevant(self, subject: Any, min_grade: int = 1) -> set:
        return {d for d, g in self[subject].items() if g >= min_grade}

    def to_dict(self) -> dict:
        return {s: dict(d) for s, d in self._judgments.items()}

    def __repr__(self) -> str:
        return f"Qrels(name={self.name!r}, subjects={len(self)})"

    @classmethod
    def read(cls, path: str | Path, *, on_error: str = "raise") -> "Qrels":
        """Read BEIR ``qrels.tsv`` (header ``query-id corpus-id score``) or TREC qrels
        (``qid iter docid grade``), detected from the number of columns; ``on_error`` as
        :meth:`Run.read_trec`."""
        path = Path(path)
        judgments: dict[str, dict[str, int]] = {}
        first = True
        for lineno, line in _read_lines(path, on_error):
            parts = line.split()
            if first:
                first = False
                if parts[:2] == ["query-id", "corpus-id"] or parts[0] in ("query-id", "qid", "query_id"):
                    continue
            if len(parts) == 3:
                qid, docid, grade = parts
            elif len(parts) == 4:
                qid, _, docid, grade = parts
            else:
                raise InputFormatError(
                    f"{path}:{lineno}: a qrels line needs 3 columns (BEIR: query-id corpus-id score) "
                    f"or 4 (TREC: qid iter docid grade); got {len(parts)}: {line[:80]!r}"
                )
            try:
                g = int(float(grade))
            except (ValueError, OverflowError):  # not a number, NaN, or infinite
                raise InputFormatError(f"{path}:{lineno}: grade {grade!r} is not a finite number.") from None
            judgments.setdefault(qid, {})[docid] = g
        return cls(judgments, name=path.stem)

    def write_trec(self, path: str | Path) -> None:
        from salience.io.files import atomic_write_text

        lines = [f"{q} 0 {d} {g}\n" for q, docs in self._judgments.items() for d, g in docs.items()]
        atomic_write_text(path, "".join(lines))


def check_trec_token(value: Any, what: str) -> str:
    """``value`` as one column of a TREC file: non-empty text without whitespace (a tag or an id
    with a space would add columns that every reader, salience's too, refuses)."""
    text = str(value)
    if not text or any(c.isspace() for c in text):
        raise InvalidParameterError(f"{what} {text!r} cannot be written to a TREC file, whose columns are separated "
                                    "by whitespace: use ids and tags without spaces.")
    return text


def as_run(run: Run | Mapping, name: str = "run") -> Run:
    if isinstance(run, Run):
        return run
    if isinstance(run, Mapping):
        return Run(run, name=name)
    raise InvalidParameterError(f"expected a Run or a mapping {{subject: {{item: score}}}}; got {type(run).__name__}.")


def as_qrels(qrels: Qrels | Mapping) -> Qrels:
    if isinstance(qrels, Qrels):
        return qrels
    if isinstance(qrels, Mapping):
        return Qrels(qrels)
    raise InvalidParameterError(f"expected Qrels or a mapping {{subject: {{item: grade}}}}; got {type(qrels).__name__}.")

