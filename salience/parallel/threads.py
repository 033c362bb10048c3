"""Threads for work that runs beside the caller's (a hybrid's lexical side while the caller
encodes the dense side's queries): one process-wide pool, as starting a thread for each batch
costs more than a small batch's search, and BLAS held to one thread while such threads keep the
cores busy. Compiled kernels and matrix products release the interpreter lock, so they run at
once."""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Callable, Iterator

__all__ = ["beside", "on_pool_thread", "one_blas_thread", "SharedChunks"]

_PREFIX = "salience-beside"
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def beside(function: Callable[..., Any], /, *args, **kwargs) -> Future:
    """``function(*args, **kwargs)`` started on the shared pool; its result (or error) is the
    future's. The pool holds one thread per core: callers in more threads than that wait for
    one to be free. Called from one of the pool's threads, it runs ``function`` there and then
    (waiting on the pool from inside it could wait for ever)."""
    global _pool
    if on_pool_thread():
        done: Future = Future()
        try:
            done.set_result(function(*args, **kwargs))
        except Exception as error:  # noqa: BLE001 - the future carries it, as the pool's would
            done.set_exception(error)
        return done
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2), thread_name_prefix=_PREFIX)
        return _pool.submit(function, *args, **kwargs)


def on_pool_thread() -> bool:
    """Whether this thread is one of the shared pool's (where :func:`beside` runs work at once)."""
    return threading.current_thread().name.startswith(_PREFIX)


_blas_lock = threading.Lock()
_blas_holders = 0
_blas_saved: list = []
_blas_controllers: list | None = None


def _forget_threads() -> None:
    # a forked child has none of its parent's threads: it starts a pool of its own, and no
    # thread of its own is inside one_blas_thread (a lock held by a parent's thread stays held)
    global _pool, _lock, _blas_lock, _blas_holders, _blas_saved
    _pool, _lock = None, threading.Lock()
    _blas_lock, _blas_holders, _blas_saved = threading.Lock(), 0, []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads)


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """BLAS (numpy's matrix products) on one thread while the block runs, in every thread of the
    process: for work that already keeps each core busy with a thread of its own. An idle BLAS
    helper thread spins for a while after each product, on the core another thread needs. The
    limit holds until the last thread inside such a block leaves it; without threadpoolctl
    (``pip install threadpoolctl``) nothing is limited."""
    global _blas_holders, _blas_saved
    with _blas_lock:
        if _blas_holders == 0:
            controllers = _blas_libraries()
            _blas_saved = [(c, c.num_threads) for c in controllers]
            for controller, _ in _blas_saved:
                _set_threads(controller, 1)
        _blas_holders += 1
    try:
        yield
    finally:
        with _blas_lock:
            _blas_holders -= 1
            if _blas_holders == 0:
                for controller, threads in _blas_saved:
                    _set_threads(controller, threads)
                _blas_saved = []


def _set_threads(controller, threads: int) -> None:
    # threadpoolctl lets only the first thread that limits OpenBLAS's process-wide pool limit it
    # again (others do nothing); here whichever thread leaves last restores it, under our lock
    release = getattr(type(controller), "clear_controlling_thread", None)
    if release is not None:
        release(force=True)
    controller.set_num_threads(threads)
    if release is not None:
        release(force=True)


def _blas_libraries() -> list:
    """threadpoolctl's controllers of the BLAS libraries loaded (found once: finding them reads
    every loaded library); empty without threadpoolctl."""
    global _blas_controllers
    if _blas_controllers is None:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:
            _blas_controllers = []
        else:
            _blas_controllers = list(ThreadpoolController().select(user_api="blas").lib_controllers)
    return _blas_controllers


class SharedChunks:
    """Work one thread hands out in chunks and a second thread helps with once its own work is
    done: :meth:`share` runs ``work(lo, hi)`` over the chunks of ``range(n)`` (``chunk`` long,
    by default the one given here), taking chunks in turn with whichever thread is in
    :meth:`serve`, and returns when every chunk is done (its errors raised in the caller). A
    chunk the helper has not reached is taken by the caller, so a busy helper never makes the
    caller wait."""

    def __init__(self, chunk: int):
        import queue

        self.chunk = chunk
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()

    def share(self, n: int, work: Callable[[int, int], Any], chunk: int | None = None) -> None:
        from itertools import count

        chunk = chunk or self.chunk
        chunks = [(lo, min(lo + chunk, n)) for lo in range(0, n, chunk)]
        turn, lock, finished = count(), threading.Lock(), threading.Event()
        state = {"done": 0, "error": None}

        def take() -> None:
            for i in iter(turn.__next__, None):
                if i >= len(chunks):
                    return
                try:
                    work(*chunks[i])
                except Exception as error:  # noqa: BLE001 - handed to the caller, which raises it
                    state["error"] = state["error"] or error
                finally:
                    with lock:
                        state["done"] += 1
                        if state["done"] == len(chunks):
                            finished.set()

        if not chunks:
            return
        self._jobs.put(take)
        take()
        finished.wait()
        if state["error"] is not None:
            raise state["error"]

    def serve(self) -> None:
        """Help with the chunks shared until :meth:`close` (in the helping thread)."""
        for job in iter(self._jobs.get, None):
            job()

    def close(self) -> None:
        self._jobs.put(None)
