"""Atomic writes and line-exact reading of (possibly gzipped) text files."""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import gzip
import json
import os
import shutil
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Callable, Collection, Iterator

from salience.exceptions import InputFormatError

__all__ = [
    "folder_format",
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_directory",
    "fsync_dir",
    "iter_text_lines",
    "ON_ERROR",
    "check_on_error",
    "iter_jsonl",
    "read_records",
    "open_binary",
    "open_raw",
    "check_output_path",
    "sweep_stale_temporaries",
    "owned_files",
    "carry_user_files",
]



def fsync_dir(path: str | Path) -> None:
    """Flush a directory entry to disk (no-op where the OS does not allow it)."""
    with contextlib.suppress(OSError):
        fd = os.open(str(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _umask() -> int:
    """The process's umask, read without changing it where the system allows (a change would
    race with other threads creating files)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            return next(int(line.split()[1], 8) for line in fh if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def usual_mode(path: str | Path, directory: bool = False) -> int:
    """The mode a new file or folder gets from the umask (temporary files are made 0600 and
    folders 0700; what is renamed into place must not stay so); an existing file keeps its own."""
    with contextlib.suppress(OSError):
        if not directory:
            return os.stat(path).st_mode & 0o7777
    return (0o777 if directory else 0o666) & ~_umask()


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same folder, fsync, rename. A new
    file follows the umask; a replaced one keeps its mode."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = usual_mode(path)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path.name), suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def temporary_prefix(name: str) -> str:
    """Prefix of this process's temporary siblings of ``name``: ``.NAME.PID.``, so that a later
    write can tell which leftovers belong to a process that no longer runs."""
    return f".{name}.{os.getpid()}."


def sweep_stale_temporaries(folder: str | Path, name: str | Collection[str]) -> int:
    """Remove ``.NAME.PID.*.tmp`` / ``.old`` entries in ``folder`` left by killed writers
    (processes that no longer run), for one name or several (the folder listed once); return
    how many were removed."""
    folder = Path(folder)
    names = {name} if isinstance(name, str) else set(name)
    removed = 0
    try:
        entries = [entry for entry in os.scandir(folder) if entry.name.startswith(".")]
    except (FileNotFoundError, NotADirectoryError):
        return 0
    for dirent in entries:
        if not (dirent.name.endswith(".tmp") or dirent.name.endswith(".old")):
            continue
        owner = _temporary_of(dirent.name, names)
        if owner is None:
            continue
        name, pid = owner
        if pid == os.getpid() or _pid_alive(pid):
            continue
        entry, target = Path(dirent.path), folder / name
        if entry.name.endswith(".old") and (entry / "index").is_dir() and not target.exists():
            # the writer died between its two renames: the old folder goes back in place
            os.replace(entry / "index", target)
            fsync_dir(folder)
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                entry.unlink()
        removed += 1
    return removed


def _temporary_of(entry: str, names: set[str]) -> tuple[str, int] | None:
    """(NAME, PID) when ``entry`` is ``.NAME.PID.*`` for one of ``names`` (a name may hold dots)."""
    dot = 0
    while (dot := entry.find(".", dot + 1)) != -1:
        pid, _, _ = entry[dot + 1 :].partition(".")
        if pid.isdigit() and entry[1:dot] in names:
            return entry[1:dot], int(pid)
    return None


def _contains(folder: Path, path: Path) -> bool:
    return folder == path or folder in path.parents


def check_output_path(out: str | Path, inputs=(), *, what: str = "output", is_own=None, option: str = "--out") -> Path:
    """Refuse an output path that would destroy data; return it resolved.

    Refused: ``out`` is one of ``inputs`` or a folder that contains one, or sits inside an input
    folder; or ``out`` exists and ``is_own(out)`` (the command's own earlier output, replaced
    atomically) is not true. ``.`` and other existing folders that are not earlier outputs are
    refused the same way, before anything is written.
    """
    from salience.exceptions import InvalidParameterError

    raw = Path(out)
    target = raw.resolve()
    for source in inputs:
        source = Path(source).resolve()
        if _contains(target, source):
            role = "is" if target == source else "contains"
            raise InvalidParameterError(
                f"{option} {raw} {role} the input {source}; writing there would destroy it. Choose another {what} path."
            )
        if source.is_dir() and _contains(source, target):
            raise InvalidParameterError(
                f"{option} {raw} lies inside the input folder {source}. Choose an {what} path outside it."
            )
    if target.exists() or target.is_symlink():
        if is_own is None or not is_own(target):
            kind = "folder" if target.is_dir() else "file"
            raise InvalidParameterError(
                f"{option} {raw} already exists and is a {kind} this command did not write; it is left untouched. "
                f"Choose a new {what} path, or remove it first."
            )
    return target


def owned_files(patterns: Collection[str]) -> Callable[[str], bool]:
    """A test of which files of an output folder a command owns, from glob ``patterns`` over
    paths relative to the folder (``/``-separated): a pattern without ``/`` names top-level
    files only (``config.json`` is the command's, ``notes/config.json`` the user's); in one with
    ``/``, ``*`` spans folders (``seg-[0-9]*/*`` is everything in a segment folder)."""
    top = [p for p in patterns if "/" not in p]
    nested = [p for p in patterns if "/" in p]

    def owned(relative: str) -> bool:
        if "/" not in relative:
            return any(fnmatch.fnmatchcase(relative, p) for p in top)
        return any(fnmatch.fnmatchcase(relative, p) for p in nested)

    return owned


def carry_user_files(old: Path, new: Path, owned: Callable[[str], bool]) -> int:
    """Give the folder ``new`` every file of ``old`` that is the user's: not ``owned`` by the
    command and not written anew (hard links where the file system allows, else copies, so that
    ``old`` stays whole until it is replaced); folders the user made come along, empty ones too.
    Returns how many files were carried."""
    from salience.exceptions import InvalidParameterError

    carried = 0
    for folder, dirs, files in os.walk(old):
        here = Path(folder)
        for name in sorted(dirs + files):
            source = here / name
            relative = source.relative_to(old).as_posix()
            target = new / relative
            if source.is_dir() and not source.is_symlink():
                if not owned(relative + "/") and not target.exists():
                    target.mkdir(parents=True, exist_ok=True)
                continue
            if owned(relative) or target.exists() or target.is_symlink():
                continue
            if target.parent.exists() and not target.parent.is_dir():
                raise InvalidParameterError(
                    f"{source} is the user's, but the new output writes a file at {target.parent.relative_to(new)}: "
                    "move it away first; nothing was replaced.")
            target.parent.mkdir(parents=True, exist_ok=True)
            if source.is_symlink():
                os.symlink(os.readlink(source), target)
            else:
                try:
                    os.link(source, target)
                except OSError:
                    shutil.copy2(source, target)
            carried += 1
    return carried


@contextlib.contextmanager
def atomic_directory(path: str | Path, owned: Callable[[str], bool] | None = None) -> Iterator[Path]:
    """Build a directory under a temporary name and move it into place only on success.

    An existing directory at ``path`` is replaced as a whole, except that with ``owned`` (a test
    of which relative paths the command writes, :func:`owned_files`) every other file there, the
    user's, is carried into the new folder first (:func:`carry_user_files`). An exception (or
    Ctrl-C) leaves the old one untouched and removes the temporary one. Temporaries of earlier,
    killed writers are swept first.
    """
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_temporaries(path.parent, path.name)
    tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(path.name), suffix=".tmp", dir=path.parent))
    try:
        os.chmod(tmp, usual_mode(tmp, directory=True))
        yield tmp
        # what was written follows the umask, whatever a library chose (safetensors writes 0600)
        umask = _umask()
        for child in tmp.rglob("*"):
            if not child.is_symlink():
                os.chmod(child, (0o777 if child.is_dir() else 0o666) & ~umask)
        if owned is not None and path.is_dir():
            carry_user_files(path, tmp, owned)
        for child in tmp.rglob("*"):
            if child.is_file():
                with open(child, "rb") as fh:
                    os.fsync(fh.fileno())
        fsync_dir(tmp)
        if path.exists():
            if exchange_paths(tmp, path):  # one atomic step: the path always holds old or new
                shutil.rmtree(tmp, ignore_errors=True)  # now the old folder
            else:
                # two renames: a kill between them leaves the old folder in ``.NAME.PID.*.old``,
                # which the next writer's sweep moves back (``sweep_stale_temporaries``)
                old = Path(tempfile.mkdtemp(prefix=temporary_prefix(path.name), suffix=".old", dir=path.parent))
                os.replace(path, old / "index")
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def exchange_paths(a: str | Path, b: str | Path) -> bool:
    """Swap two existing paths atomically (Linux ``renameat2(RENAME_EXCHANGE)``); False where
    the system or file system cannot, and nothing was changed."""
    import ctypes

    global _renameat2
    if _renameat2 is False:
        return False
    if _renameat2 is None:
        _renameat2 = False
        if sys.platform.startswith("linux"):
            with contextlib.suppress(OSError, AttributeError):
                function = ctypes.CDLL(None, use_errno=True).renameat2
                function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
                function.restype = ctypes.c_int
                _renameat2 = function
        if _renameat2 is False:
            return False
    at_cwd, rename_exchange = -100, 2
    if _renameat2(at_cwd, os.fsencode(str(a)), at_cwd, os.fsencode(str(b)), rename_exchange) == 0:
        return True
    errno_value = ctypes.get_errno()
    if errno_value in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EXDEV, errno.EPERM):
        return False  # not supported here: fall back to two renames
    raise OSError(errno_value, os.strerror(errno_value), str(b))


_renameat2 = None  # the libc function once looked up; False where there is none


def open_raw(path: Path):
    """An input file opened for reading bytes as stored; a missing file or a folder is named."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise InputFormatError(f"{path}: file not found.") from None
    except IsADirectoryError:
        raise InputFormatError(f"{path}: is a folder, expected a file.") from None


def open_binary(path: Path):
    """An input file's bytes, decompressed when its name ends in ``.gz``."""
    raw = open_raw(path)
    return _GzipClosingRaw(raw) if Path(path).suffix == ".gz" else raw


class _GzipClosingRaw(gzip.GzipFile):
    """A gzip reader over an open file that closes that file too."""

    def __init__(self, raw):
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


ON_ERROR = ("raise", "skip", "replace")


def check_on_error(on_error: object) -> str:
    """The one policy for unreadable input everywhere: ``raise`` (stop, naming file and line),
    ``skip`` (drop the record, counted where a report is kept) or ``replace`` (decode invalid
    UTF-8 with U+FFFD and keep the record)."""
    if on_error not in ON_ERROR:
        from salience.exceptions import unknown_choice

        raise unknown_choice("on_error", on_error, ON_ERROR)
    return str(on_error)


def iter_text_lines(path: str | Path, on_error: str = "raise") -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for each line of a text or ``.gz`` file.

    Invalid UTF-8 raises :class:`InputFormatError` naming the file and line with
    ``on_error="raise"``; ``"replace"`` decodes it with U+FFFD; ``"skip"`` drops the line. A
    corrupt gzip stream raises the same error naming the file and the last good line.
    """
    check_on_error(on_error)
    path = Path(path)
    lineno = 0
    errors = "replace" if on_error == "replace" else "strict"
    with open_binary(path) as fh:
        try:
            for lineno, raw in enumerate(fh, start=1):
                try:
                    text = raw.decode("utf-8", errors=errors)
                except UnicodeDecodeError as err:
                    if on_error == "skip":
                        continue
                    raise InputFormatError(
                        f"{path}:{lineno}: invalid UTF-8 at byte {err.start} of the line. "
                        "Fix the file, or pass on_error='replace' or 'skip' (CLI: --on-error replace)."
                    ) from None
                yield lineno, text
        except (EOFError, OSError, zlib.error) as err:
            raise InputFormatError(f"{path}: corrupt or truncated compressed data after line {lineno}: {err}") from None


def iter_jsonl(path: str | Path, on_error: str = "raise") -> Iterator[tuple[int, dict]]:
    """Yield ``(line_number, record)`` for each non-blank line of a jsonl / jsonl.gz file
    (``on_error="skip"`` also drops lines that are not JSON objects)."""
    path = Path(path)
    for lineno, line in iter_text_lines(path, on_error):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if on_error == "skip":
                continue
            raise InputFormatError(f"{path}:{lineno}: invalid JSON ({err.msg} at column {err.colno}).") from None
        if not isinstance(record, dict):
            if on_error == "skip":
                continue
            raise InputFormatError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}.")
        yield lineno, record


def read_records(path: str | Path, required: dict, on_error: str = "raise") -> list[dict]:
    """All records of a jsonl file, each checked to hold the ``required`` fields.

    ``required`` maps a field name to ``(check, what)``: ``check(value)`` says whether the value
    is acceptable and ``what`` describes it for the error, which names the file and line.
    """
    records = []
    for lineno, record in iter_jsonl(path, on_error):
        for name, (check, what) in required.items():
            if not check(record.get(name)):
                raise InputFormatError(f"{path}:{lineno}: record has no {what}.")
        records.append(record)
    if not records:
        raise InputFormatError(f"{path}: no records.")
    return records


def folder_format(path: str | Path, manifest: str) -> str | None:
    """The format a folder's manifest file (``manifest``, JSON) names, or None when there is no
    readable manifest: how each kind of saved folder (indexes, shards, static encoders) is told
    apart before it is opened."""
    file = Path(path) / manifest
    try:
        body = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None
    except (OSError, ValueError):
        return None
    return body.get("format") if isinstance(body, dict) else None
