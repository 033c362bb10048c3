"""Errors raised by salience.

Every error derives from :class:`SalienceError`, so ``except SalienceError``
catches anything the library raises on purpose::

    SalienceError
    ├── InvalidParameterError(ValueError, TypeError)   bad argument value or type
    ├── ShapeError(ValueError)                         arrays that do not line up
    ├── IdMismatchError(KeyError, ValueError)          unknown or duplicate ids
    │   └── DuplicateIdError                           an id given twice, or one already there
    ├── InputFormatError(ValueError)                   unreadable input file (names file and line)
    ├── NotFittedError(RuntimeError)                   method needs a fitted object
    ├── JudgeError(RuntimeError)                       a judge raised, returned an invalid value, or ran out of budget
    ├── CorruptIndexError(OSError)                     partial or damaged index file (names the file)
    ├── WorkerError(RuntimeError)                      a worker process died (killed, out of memory)
    ├── ShardUnavailableError(RuntimeError)            a shard of a sharded index did not answer
    ├── ClusterUnreachableError(ConnectionError)       a cluster's address did not answer in time
    └── MissingDependencyError(ImportError)            an optional extra is not installed
"""

from __future__ import annotations

import difflib
from typing import Iterable

__all__ = [
    "SalienceError",
    "InvalidParameterError",
    "ShapeError",
    "IdMismatchError",
    "DuplicateIdError",
    "InputFormatError",
    "NotFittedError",
    "JudgeError",
    "CorruptIndexError",
    "WorkerError",
    "ShardUnavailableError",
    "ClusterUnreachableError",
    "MissingDependencyError",
    "unknown_choice",
]


class SalienceError(Exception):
    """Base class of every error salience raises on purpose."""


class InvalidParameterError(SalienceError, ValueError, TypeError):
    """An argument has a value or type the function cannot use."""


class ShapeError(SalienceError, ValueError):
    """Arrays or sequences that must line up do not."""


class IdMismatchError(SalienceError, KeyError, ValueError):
    """An id is unknown, duplicated, or does not match its partner collection."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class DuplicateIdError(IdMismatchError):
    """An id is given twice, or is already in the collection it is added to."""


class InputFormatError(SalienceError, ValueError):
    """An input file or record cannot be read; the message names file and line."""


class NotFittedError(SalienceError, RuntimeError):
    """The object must be fitted (or indexed) before this call."""


class JudgeError(SalienceError, RuntimeError):
    """A judge (comparator or listwise ranker) failed, returned an invalid value, or its call
    budget ran out; the message names the call."""


class CorruptIndexError(SalienceError, OSError):
    """A saved index is partial or damaged; the message names the file."""


class WorkerError(SalienceError, RuntimeError):
    """A worker process ended abruptly (a signal, the out-of-memory killer); the message names
    the process and the signal."""


class ShardUnavailableError(SalienceError, RuntimeError):
    """A shard of a sharded index did not answer (its actor died, its node left the cluster)."""


class ClusterUnreachableError(SalienceError, ConnectionError):
    """The address of a cluster (Ray's) did not answer within the stated timeout."""


class MissingDependencyError(SalienceError, ImportError):
    """An optional dependency is missing; the message gives the pip command."""


def unknown_choice(what: str, value: object, valid: Iterable[str]) -> InvalidParameterError:
    """Build the error for an unknown name, listing valid names with a did-you-mean."""
    valid = sorted(valid)
    hint = difflib.get_close_matches(str(value), valid, n=1)
    msg = f"unknown {what} {value!r}; valid values are: {', '.join(valid)}."
    if hint:
        msg += f" Did you mean {hint[0]!r}?"
    return InvalidParameterError(msg)
