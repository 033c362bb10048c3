"""Running work in parallel: one :class:`Executor` protocol for every domain, with local
processes by default and Ray behind the ``ray`` extra, and the one progress bar helper.

An executor runs picklable jobs: ``submit(job, args)`` keeps a bounded number in flight,
``drain()`` waits for them (re-raising a job's error), ``map(job, items)`` returns results in
order, and ``close()`` ends it. Local workers end with their parent, so a killed run leaves none
writing into its work folder.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any, Callable, Protocol

from salience.core.checks import check_n_jobs
from salience.exceptions import ClusterUnreachableError, InvalidParameterError, WorkerError, unknown_choice
from salience.extras import require

__all__ = ["Executor", "EXECUTORS", "LocalExecutor", "RayExecutor", "make_executor", "progress_bar", "map_shards",
           "exit_with_parent", "ray_session", "join_ray",
           "shard_size"]

EXECUTORS = ("local", "ray")


class Executor(Protocol):
    def submit(self, job: Callable[[Any], Any], args: Any) -> None: ...

    def drain(self) -> None: ...

    def map(self, job: Callable[[Any], Any], items: list) -> list: ...

    def close(self) -> None: ...


def exit_with_parent(parent: int, grace_s: float = 0.0) -> None:
    """A daemon thread ends this process soon after its parent dies (a killed run must not leave
    workers writing into its work folder, nor a killed service its workers answering). With
    ``grace_s`` it is first asked to stop (SIGTERM: a service finishes the requests in flight) and
    ended that many seconds later if it has not."""
    import signal
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        if grace_s > 0:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="salience-parent-watch", daemon=True).start()


class LocalExecutor:
    """Local worker processes (``n_jobs`` of them; 1 runs jobs in this process).
    ``start_method="spawn"`` starts them afresh instead of forking."""

    def __init__(self, n_jobs: int = 2, start_method: str | None = None):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        n_jobs = check_n_jobs(n_jobs)
        context = multiprocessing.get_context(start_method) if start_method else None
        self.pool = (ProcessPoolExecutor(n_jobs, mp_context=context, initializer=exit_with_parent,
                                         initargs=(os.getpid(),)) if n_jobs > 1 else None)
        self.limit = 2 * n_jobs
        self.pending: list = []
        self.workers: dict = {}  # pid -> process, kept to say which one died

    def submit(self, job, args) -> None:
        if self.pool is None:
            job(args)
            return
        with self._watch():
            self.pending.append(self.pool.submit(job, args))
            self.workers.update(self.pool._processes or {})
        if len(self.pending) >= self.limit:
            self._wait(self.limit // 2)

    def _wait(self, keep: int) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait

        with self._watch():
            while len(self.pending) > keep:
                done, rest = wait(self.pending, return_when=FIRST_COMPLETED)
                for future in done:
                    future.result()  # re-raises a worker's error, naming file and line
                self.pending = list(rest)

    def drain(self) -> None:
        self._wait(0)

    def map(self, job, items: list) -> list:
        if self.pool is None:
            return [job(item) for item in items]
        with self._watch():
            futures = [self.pool.submit(job, item) for item in items]
            self.workers.update(self.pool._processes or {})
            return [future.result() for future in futures]

    @contextlib.contextmanager
    def _watch(self):
        """A pool broken by a worker's death becomes a :class:`WorkerError` naming the process."""
        from concurrent.futures.process import BrokenProcessPool

        try:
            yield
        except BrokenProcessPool:
            self.pending = []
            raise WorkerError(_death_notice(self.workers)) from None

    def close(self) -> None:
        try:
            self._wait(0)
        finally:
            if self.pool is not None:
                self.pool.shutdown(cancel_futures=True)


def _death_notice(workers: dict) -> str:
    import signal

    for process in workers.values():
        process.join(timeout=1)
        # the pool's own thread joins the same processes: when it reaps one first, this join
        # sees no exit status (waitpid: no child) until that thread has stored it; wait for it
        for _ in range(40):
            if process.exitcode is not None:
                break
            time.sleep(0.025)
    ended = [(pid, p.exitcode) for pid, p in workers.items() if p.exitcode not in (None, 0)]
    # the pool ends the other workers with SIGTERM once one has died: name the first other death
    first = next((e for e in ended if e[1] != -signal.SIGTERM), ended[0] if ended else None)
    if first is None:
        what = "a worker process ended abruptly"
    else:
        pid, code = first
        if code < 0:
            name = signal.Signals(-code).name
            why = " (what the kernel's out-of-memory killer sends)" if -code == signal.SIGKILL else ""
            what = f"worker process {pid} was killed by {name}{why}"
        else:
            what = f"worker process {pid} exited with status {code}"
    return f"{what}; the run stopped and wrote no output. Rerun it, with fewer jobs (--n-jobs) if memory ran out."


#: seconds a Ray cluster's address is given to answer before it is reported unreachable
RAY_CONNECT_TIMEOUT = 10.0


def join_ray(ray, address: str | None, timeout: float = RAY_CONNECT_TIMEOUT, **options) -> None:
    """``ray.init`` joining the cluster at ``address`` (or ``RAY_ADDRESS``), after checking
    that its host:port accepts a connection within ``timeout`` seconds: an unreachable address
    is a :class:`ClusterUnreachableError` naming it within that time, not a wait on Ray's own
    retries; one that answers but is not a Ray cluster is the same error once Ray gives up
    (about 20 s). ``"auto"`` and ``"local"`` are Ray's to resolve."""
    import socket

    target = address or os.environ.get("RAY_ADDRESS")
    if target and target not in ("auto", "local"):
        host_port = target.split("://", 1)[-1].rstrip("/")
        host, _, port = host_port.rpartition(":")
        if not host or not port.isdigit():
            raise InvalidParameterError(f"Ray address {target!r}: expected HOST:PORT, ray://HOST:PORT or 'auto'.")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except OSError as err:
            raise ClusterUnreachableError(f"Ray address {target!r} cannot be reached within {timeout:g} s ({err}): start the "
                                "cluster (ray start --head) or name a running one.") from None
    started = time.monotonic()
    try:
        ray.init(address=target, log_to_driver=False, **options)
    except ConnectionError as err:  # it answered, but not as a Ray cluster (Ray retries about 20 s first)
        raise ClusterUnreachableError(f"Ray address {target!r} answered but is not a Ray cluster; Ray gave up after "
                                      f"{time.monotonic() - started:.0f} s ({err}).") from None


def ray_session(address: str | None = None, *, num_cpus: int | None = None, what: str = "The Ray executor"):
    """The ``ray`` module, initialised once per process: joining the cluster at ``address`` (or
    ``RAY_ADDRESS``; :func:`join_ray`), else a local Ray instance (with ``num_cpus`` CPUs when
    given). Every part of salience that runs on Ray starts it here."""
    ray = require("ray", "ray", what)
    if not ray.is_initialized():
        if address or os.environ.get("RAY_ADDRESS"):  # join the cluster named here or by the environment
            join_ray(ray, address)
        else:
            ray.init(**({"num_cpus": num_cpus} if num_cpus else {}), include_dashboard=False, log_to_driver=False)
    return ray


class RayExecutor:
    """Ray tasks, ``n_jobs`` in flight (twice that queued). ``address`` joins an existing
    cluster (``"auto"``, ``"ray://head:10001"``; the ``RAY_ADDRESS`` variable does the same);
    without one a local Ray instance with ``n_jobs`` CPUs is started."""

    def __init__(self, n_jobs: int = 2, *, address: str | None = None):
        n_jobs = check_n_jobs(n_jobs)
        self.ray = ray_session(address, num_cpus=n_jobs)  # a local instance: `n_jobs` CPUs
        self.tasks: dict = {}
        self.limit = 2 * n_jobs
        self.pending: list = []

    def submit(self, job, args) -> None:
        task = self.tasks.get(job)
        if task is None:
            task = self.tasks[job] = self.ray.remote(job)
        self.pending.append(task.remote(args))
        if len(self.pending) >= self.limit:
            done, self.pending = self.ray.wait(self.pending, num_returns=len(self.pending) - self.limit // 2)
            self._get(done)

    def _get(self, refs) -> None:
        try:
            self.ray.get(refs)
        except self.ray.exceptions.RayTaskError as err:
            raise (err.as_instanceof_cause() if hasattr(err, "as_instanceof_cause") else err) from None

    def drain(self) -> None:
        refs, self.pending = self.pending, []
        self._get(refs)

    def map(self, job, items: list) -> list:
        task = self.tasks.get(job)
        if task is None:
            task = self.tasks[job] = self.ray.remote(job)
        refs = [task.remote(item) for item in items]
        try:
            return self.ray.get(refs)
        except self.ray.exceptions.RayTaskError as err:
            raise (err.as_instanceof_cause() if hasattr(err, "as_instanceof_cause") else err) from None

    def close(self) -> None:
        self.drain()


class _Borrowed:
    """A caller's executor, used without closing it: ``close()`` only waits for its jobs."""

    def __init__(self, executor: Executor):
        self.executor = executor

    def submit(self, job, args) -> None:
        self.executor.submit(job, args)

    def drain(self) -> None:
        self.executor.drain()

    def map(self, job, items: list) -> list:
        return self.executor.map(job, items)

    def close(self) -> None:
        self.executor.drain()


def make_executor(executor: "str | Executor", n_jobs: int, *, start_method: str | None = None) -> Executor:
    """An executor for shard jobs: ``submit(job, args)`` (bounded in flight), ``drain()`` (wait,
    re-raising a job's error), ``map(job, items)`` (results in order) and ``close()``.
    ``executor`` is a name (``"local"``, ``"ray"``) or an executor object the caller made
    (``RayExecutor(address=...)``), which is used as it is and left open.
    ``start_method="spawn"`` starts local workers afresh instead of forking the parent: jobs that
    run a model need it once the parent has run one (a forked copy of a parent's thread pools
    can hang)."""
    if not isinstance(executor, str):
        if not all(callable(getattr(executor, verb, None)) for verb in ("submit", "drain", "map", "close")):
            raise unknown_choice("executor", repr(executor), EXECUTORS)
        return _Borrowed(executor)
    if executor not in EXECUTORS:
        raise unknown_choice("executor", executor, EXECUTORS)
    n_jobs = check_n_jobs(n_jobs)
    return LocalExecutor(n_jobs, start_method) if executor == "local" else RayExecutor(n_jobs)


class _NoProgress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int | None, desc: str, enabled: bool, unit: str = "it"):
    """A tqdm bar (a context manager with ``update`` and ``close``) when ``enabled``, else one
    that does nothing; tqdm is imported only when a bar is shown."""
    if not enabled:
        return _NoProgress()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, leave=False, mininterval=0.5)


def map_shards(job: Callable[[Any], Any], items: list, n_jobs: int, executor: "str | Executor" = "local", *,
               start_method: str | None = None):
    """``job`` over ``items`` on an executor, results yielded in order with a few shards in
    flight (2 per job); the executor is closed at the end, or on an error."""
    runner = make_executor(executor, n_jobs, start_method=start_method)
    try:
        window = 2 * check_n_jobs(n_jobs)
        for lo in range(0, len(items), window):
            yield from runner.map(job, items[lo : lo + window])
    finally:
        runner.close()


def shard_size(n: int, n_jobs: int) -> int:
    """Items per shard: about four shards per job, so that uneven shards even out."""
    return max(1, -(-n // (4 * n_jobs)))
