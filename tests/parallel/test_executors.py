"""Executors given by name or as objects (``executor=RayExecutor(address=...)``)."""

import sys
import types

import pytest

from salience.exceptions import InvalidParameterError
from salience.parallel import LocalExecutor, RayExecutor, make_executor
from salience.search import BM25

DOCS = [{"_id": f"d{i}", "text": f"word{i % 7} common text number {i}"} for i in range(60)]


def test_an_executor_object_is_used_and_left_open():
    pool = LocalExecutor(2)
    try:
        built = BM25().fit(DOCS, n_jobs=2, executor=pool)
        assert built.search("word3", k=5) == BM25().fit(DOCS).search("word3", k=5)
        assert pool.map(abs, [-1, -2]) == [1, 2]  # still open: the caller closes it
    finally:
        pool.close()
    with pytest.raises(InvalidParameterError, match="unknown executor"):
        make_executor(object(), 2)
    with pytest.raises(InvalidParameterError, match="n_jobs"):
        LocalExecutor(0)


def test_ray_executor_joins_the_cluster_named_by_address(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(is_initialized=lambda: False, init=lambda **kw: calls.append(kw))
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    import socket

    probed = []  # the address is checked to answer before Ray is asked to join it
    monkeypatch.setattr(socket, "create_connection", lambda address, timeout: probed.append(address) or
                        types.SimpleNamespace(close=lambda: None))
    RayExecutor(2, address="ray://head:10001")
    assert probed == [("head", 10001)]
    RayExecutor(3)
    assert calls[0] == {"address": "ray://head:10001", "log_to_driver": False}
    assert calls[1]["num_cpus"] == 3 and "address" not in calls[1]


def test_the_death_notice_waits_for_an_exit_status_the_pool_is_collecting():
    # the pool's thread joins its workers too: whichever reaps a worker first stores its status,
    # and the other sees none for a moment; the notice must not then blame only the SIGTERM'd one
    import signal
    import threading
    import time

    from salience.parallel import _death_notice

    class Worker:
        def __init__(self, exitcode, delay):
            self.exitcode = None
            threading.Timer(delay, lambda: setattr(self, "exitcode", exitcode)).start()

        def join(self, timeout=None):
            pass

    workers = {101: Worker(-signal.SIGKILL, 0.2), 102: Worker(-signal.SIGTERM, 0.0)}
    time.sleep(0.05)
    notice = _death_notice(workers)
    assert notice.startswith("worker process 101 was killed by SIGKILL") and "wrote no output" in notice
