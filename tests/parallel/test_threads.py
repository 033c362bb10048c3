"""The shared pool of threads beside the caller's, and BLAS held to one thread while both run."""

import multiprocessing
import threading

import numpy as np
import pytest

from salience.parallel.threads import beside, one_blas_thread


def test_work_runs_beside_on_threads_that_stay():
    names = {beside(lambda: threading.current_thread().name).result(timeout=10) for _ in range(20)}
    assert all(name.startswith("salience-beside") for name in names)
    assert len(names) <= max(2, multiprocessing.cpu_count())  # reused, not one thread a call
    assert beside(sorted, [3, 1, 2], reverse=True).result(timeout=10) == [3, 2, 1]


def test_an_error_beside_reaches_the_caller():
    def fail():
        raise ValueError("from beside")

    with pytest.raises(ValueError, match="from beside"):
        beside(fail).result(timeout=10)


def _child_uses_the_pool(queue):
    queue.put(beside(lambda: 41 + 1).result(timeout=10))


def test_a_forked_child_starts_a_pool_of_its_own():
    # the parent's threads do not exist in the child: submitting to the parent's pool would hang
    beside(int).result(timeout=10)
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_uses_the_pool, args=(queue,))
    child.start()
    child.join(30)
    assert child.exitcode == 0 and queue.get(timeout=5) == 42


def test_blas_holds_one_thread_until_the_last_block_leaves():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    from salience.parallel.threads import _blas_libraries

    np.ones((4, 4)) @ np.ones((4, 4))
    numpy_blas = {info["filepath"] for info in threadpoolctl.threadpool_info()
                  if info["user_api"] == "blas" and "numpy" in info["filepath"]}
    # the libraries limited are those loaded when first asked (numpy's among them)
    assert numpy_blas <= {controller.filepath for controller in _blas_libraries()}

    def blas_threads():
        return {controller.num_threads for controller in _blas_libraries()}

    before = blas_threads()
    entered, release = threading.Event(), threading.Event()

    def hold():
        with one_blas_thread():
            entered.set()
            release.wait(10)

    other = threading.Thread(target=hold)
    with one_blas_thread():
        assert blas_threads() == {1}
        other.start()
        entered.wait(10)
    assert blas_threads() == {1}  # the other thread is still inside
    release.set()
    other.join(10)
    assert blas_threads() == before


def test_shared_chunks_cover_every_row_once_with_or_without_a_helper():
    from salience.parallel.threads import SharedChunks

    for helped in (False, True):
        shared = SharedChunks(7)
        helper = beside(shared.serve) if helped else None
        seen = []
        lock = threading.Lock()

        def work(lo, hi):
            with lock:
                seen.extend(range(lo, hi))

        shared.share(50, work)
        shared.share(0, work)  # nothing to do: returns at once
        shared.share(3, work)
        shared.close()
        if helper is not None:
            helper.result(timeout=10)
        assert sorted(seen) == sorted(list(range(50)) + list(range(3)))


def test_an_error_in_a_shared_chunk_reaches_the_caller():
    from salience.parallel.threads import SharedChunks

    shared = SharedChunks(4)
    helper = beside(shared.serve)

    def work(lo, hi):
        if lo == 8:
            raise ValueError("chunk 8")

    with pytest.raises(ValueError, match="chunk 8"):
        shared.share(20, work)
    shared.close()
    helper.result(timeout=10)


def test_work_put_beside_from_beside_runs_at_once():
    # nested: every pool thread could be waiting on work queued behind it
    def nested(depth):
        if depth == 0:
            return threading.current_thread().name
        return beside(nested, depth - 1).result(timeout=10)

    futures = [beside(nested, 5) for _ in range(8)]
    assert all(f.result(timeout=20).startswith("salience-beside") for f in futures)
