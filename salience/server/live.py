"""A ``salience serve`` process on a free local port, for tests and benchmarks:

    with LiveServer(["pets"], api_key_file="key.txt") as server:
        server.request("POST", "/indexes/pets/search", {"query": "cats"})

It is started with ``python -m salience serve`` (the command users run), polled until
``/health`` answers, and stopped with SIGTERM, or killed with SIGKILL by :meth:`kill`.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from salience.exceptions import SalienceError

__all__ = ["LiveServer", "free_port"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LiveServer:
    def __init__(self, indexes: Sequence[str | os.PathLike], *, api_key_file: str | os.PathLike | None = None,
                 options: Sequence[str] = (), start_timeout: float = 60.0):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "salience", "serve", *map(str, indexes), "--port", str(self.port), "--quiet"]
        if api_key_file is not None:
            command += ["--api-key-file", str(api_key_file)]
        self.command = command + list(options)
        self.start_timeout = start_timeout
        self.process: subprocess.Popen | None = None

    def start(self) -> "LiveServer":
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
        # a session of its own: kill() takes the worker processes of --workers with the server
        self.process = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                                        start_new_session=True)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SalienceError(f"salience serve exited with {self.process.returncode}: "
                                    f"{self.process.stderr.read().decode(errors='replace')[-2000:]}")
            try:
                self.request("GET", "/health", timeout=1.0)
                return self
            except (OSError, urllib.error.URLError):
                time.sleep(0.1)
        self.kill()
        raise SalienceError(f"salience serve did not answer on {self.url} within {self.start_timeout:g} s.")

    def request(self, method: str, path: str, body=None, *, headers: dict | None = None,
                timeout: float = 30.0) -> tuple[int, dict]:
        """``(status, JSON body)`` of one request (errors are answers too, not exceptions)."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def kill(self) -> None:
        """SIGKILL of the server and its workers: no clean-up runs (what a crash does)."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()

    def workers(self) -> list[int]:
        """The process ids of the server's worker processes (``--workers``), oldest first."""
        children = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                    command = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if b"spawn_main" not in command:  # not a worker (multiprocessing's resource tracker)
                    continue
                fields = stat[stat.rindex(")") + 2:].split()
                if int(fields[1]) == self.process.pid:  # its parent
                    children.append((int(fields[19]), int(entry.name)))  # start time, pid
        return [pid for _, pid in sorted(children)]

    def kill_worker(self, pid: int | None = None) -> int:
        """SIGKILL of one worker process (the oldest unless named); uvicorn starts another."""
        pid = pid or self.workers()[0]
        os.kill(pid, signal.SIGKILL)
        return pid

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()

    def __enter__(self) -> "LiveServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
