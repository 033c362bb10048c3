"""The HTTP service behind ``salience serve`` (``pip install 'salience[server]'``: FastAPI and
uvicorn).

Saved indexes (BM25 or dense, told apart by their manifests) are loaded at start; each is
served under the name of its folder, and both are written the same way. Reads go to the last
committed state of an index, an object no writer touches: a write works on a copy of it
(:meth:`salience.search.segmented.SegmentedIndex.copy`), commits it (the index's atomic manifest replace,
so it is durable when the request returns) and only then publishes it to readers, so a reader sees the state before a commit or after it, never half of one.
Writers to one index are serialised by a lock; writes need the API key (compared in constant
time, never logged) and are refused when the service was started without one.

Every error is JSON, ``{"error": {"code", "message", "field"}}`` with a stable ``code``; no
stack trace reaches a client (it goes to the server's log). Limits (body size, ``k``, query
and text length, batch size, time per request) are :class:`Limits`.
"""

import logging
import os
import time
from pathlib import Path
from typing import Sequence

from salience.exceptions import InvalidParameterError, MissingDependencyError
from salience.extras import install_hint, installed_version
from salience.server.errors import APIError, BodyLimit, Limits, install_error_handlers
from salience.server.indexes import ServedIndex

__all__ = ["Limits", "ServedIndex", "APIError", "create_app", "read_api_key", "serve"]

INSTALL = install_hint("server")
STATIC = Path(__file__).with_name("static")
log = logging.getLogger("salience.server")


def _require_fastapi() -> None:
    try:
        import fastapi  # noqa: F401
        import pydantic  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError(f"the HTTP service needs FastAPI ({err.name} is missing): {INSTALL}") from None


def read_api_key(path: str | os.PathLike) -> str:
    """The key in ``path`` (its first line, stripped); an empty or unreadable file is refused."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidParameterError(f"--api-key-file {path}: cannot be read ({err}).") from None
    key = text.splitlines()[0].strip() if text.strip() else ""
    if len(key) < 8:
        raise InvalidParameterError(f"--api-key-file {path}: the key must be at least 8 characters on the first line.")
    return key


def _passage_judge(judge: str, judge_model: str | None):
    """What ``/rerank`` scores posted passages with, and the name its answers carry: ``index``
    (None: the index's own scorer) or a registered judge that loads its model from a folder
    (``encoder``, ``cross``), built through the registry and warmed up now, before the service
    reports ready."""
    from salience.core.base import create, method_factory, method_names
    from salience.search.lm_judges import LMJudge

    if judge == "index":
        if judge_model is not None:
            raise InvalidParameterError("judge_model needs a judge (encoder or cross), not the index's scorer.")
        return None, None
    servable = [n for n in method_names("judge") if not issubclass(method_factory("judge", n), LMJudge)]
    if judge not in servable:
        raise InvalidParameterError(f"judge must be 'index' (the index's own scorer) or one of {', '.join(servable)}; "
                                    f"got {judge!r}.")
    kind = method_factory("judge", judge)
    if judge_model is None and kind.needs_model():
        raise InvalidParameterError(f"the {judge} judge needs its model folder (--judge-model).")
    passage_judge = create("judge", judge, **({} if judge_model is None else {kind.model_parameter: judge_model}))
    passage_judge.scores("warm", ["up"])  # the model loads now
    return passage_judge, (f"{judge} ({Path(judge_model).name})" if judge_model else "all-MiniLM-L6-v2")


def create_app(indexes: Sequence[str | os.PathLike] = (), *, api_key: str | None = None, limits: Limits | None = None,
               cors_origins: Sequence[str] = (), judge: str = "index", judge_model: str | None = None,
               shared: bool = False, watch_s: float = 0.2,
               shard_executor: str = "local", address: str | None = None, lm: str | None = None,
               lm_dtype: str | None = None):
    """The FastAPI application serving ``indexes`` (folders of saved indexes): the routers of
    :mod:`salience.server.routes` over one :class:`~salience.server.service.Service`.
    ``shared``: other processes serve the same folders (``--workers``; see
    :mod:`salience.server.indexes`); ``watch_s``: how often each folder is checked for their
    commits; ``shard_executor``, ``address``: where a sharded index's shards are held; ``lm``: a
    causal language model (a folder, a .gguf file, ``smollm2``) that answers questions from served
    passages (``/answer``, ``/verify``'s passages), loaded now in ``lm_dtype`` (as stored by default)."""
    _require_fastapi()
    from fastapi import FastAPI
    from fastapi.responses import FileResponse
    from fastapi.staticfiles import StaticFiles

    from salience.server.routes import read_router, text_router, write_router
    from salience.server.service import Service

    limits = limits or Limits()
    passage_judge, judge_name = _passage_judge(judge, judge_model)
    served: dict[str, ServedIndex] = {}
    for path in indexes:
        handle = ServedIndex(path, shared=shared, watch_s=watch_s, shard_executor=shard_executor, address=address)
        if handle.name in served:
            raise InvalidParameterError(f"two indexes are named {handle.name!r} ({served[handle.name].path} and "
                                        f"{handle.path}): serve folders with different names.")
        served[handle.name] = handle
    language_model = None
    if lm is not None:
        from salience.models.lm import load_causal_lm

        language_model = load_causal_lm(lm, dtype=lm_dtype)
    service = Service(served=served, limits=limits, api_key=api_key, passage_judge=passage_judge,
                      passage_judge_name=judge_name, language_model=language_model,
                      language_model_name=None if lm is None else str(lm))

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        yield
        for handle in served.values():
            handle.close()  # the folder watchers stop

    app = FastAPI(title="salience", version=installed_version(), description="Search, rank and find what matters.",
                  lifespan=lifespan)
    app.state.indexes, app.state.limits, app.state.service = served, limits, service
    install_error_handlers(app)
    from salience.server.fast_search import FastSearch

    app.add_middleware(FastSearch, service=service)  # inside the body limit: a middleware added later wraps it
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    writes = write_router(service)
    from salience.server.service import KeyFirst

    # outside the body limit and every parser: the key is checked first
    app.add_middleware(KeyFirst, service=service, writes=[route.path_regex for route in writes.routes])
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type"])

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for router in (read_router(service), text_router(service), writes):
        app.include_router(router)
    return app


#: the environment variable that hands ``serve``'s settings to each worker process
WORKER_CONFIG = "SALIENCE_SERVE_CONFIG"


def worker_app():
    """The application of one worker process of ``serve(workers=N)``, from the settings in
    ``SALIENCE_SERVE_CONFIG`` (uvicorn's factory: it starts the workers and restarts one that dies)."""
    import json

    from salience.parallel import exit_with_parent

    # a supervisor killed -9 cannot stop its workers: each stops itself, or it would go on
    # answering on the port with no one to restart or stop it
    exit_with_parent(os.getppid(), grace_s=5.0)
    config = json.loads(os.environ[WORKER_CONFIG])
    api_key = read_api_key(config.pop("api_key_file")) if config.get("api_key_file") else None
    config.pop("api_key_file", None)
    config["limits"] = Limits(**config["limits"])
    return create_app(config.pop("indexes"), api_key=api_key, shared=True, **config)


def serve(indexes: Sequence[str | os.PathLike], *, host: str = "127.0.0.1", port: int = 8080,
          api_key_file: str | None = None, limits: Limits | None = None, cors_origins: Sequence[str] = (),
          judge: str = "index", judge_model: str | None = None, log_level: str = "info", workers: int = 1,
          shard_executor: str = "local",
          address: str | None = None, lm: str | None = None, lm_dtype: str | None = None) -> None:
    """Run the service until interrupted (uvicorn): one process, or ``workers`` processes
    sharing the port, each with the indexes open memory-mapped and every commit visible to all
    within a fraction of a second (see :mod:`salience.server.indexes`)."""
    try:
        import uvicorn
    except ImportError:
        raise MissingDependencyError(f"the HTTP service needs uvicorn: {INSTALL}") from None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InvalidParameterError(f"workers must be a whole number >= 1; got {workers!r}.")
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        # the socket layer would take a larger number modulo 65536 and listen elsewhere
        raise InvalidParameterError(f"port must be a TCP port, 1 to 65535; got {port!r}.")
    api_key = read_api_key(api_key_file) if api_key_file else None
    started = time.perf_counter()
    # built here even with workers: a bad folder or option fails now, in the command, not in N workers
    app = create_app(indexes, api_key=api_key, limits=limits, cors_origins=cors_origins, judge=judge,
                     judge_model=judge_model,
                     shared=workers > 1, shard_executor=shard_executor, address=address, lm=lm, lm_dtype=lm_dtype)
    log.info("loaded %d indexes in %.1f s", len(app.state.indexes), time.perf_counter() - started)
    if workers == 1:
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
        return
    import json
    from dataclasses import asdict

    for handle in app.state.indexes.values():
        handle.close()
    del app
    os.environ[WORKER_CONFIG] = json.dumps({
        "indexes": [str(Path(p).resolve()) for p in indexes],
        "api_key_file": str(Path(api_key_file).resolve()) if api_key_file else None,
        "limits": asdict(limits or Limits()), "cors_origins": list(cors_origins), "judge": judge,
        "judge_model": str(Path(judge_model).resolve()) if judge_model else None,
        "shard_executor": shard_executor, "address": address,
        "lm": lm if lm is None or not Path(lm).exists() else str(Path(lm).resolve()), "lm_dtype": lm_dtype})
    uvicorn.run("salience.server.app:worker_app", factory=True, host=host, port=port, workers=workers,
                log_level=log_level, access_log=False)
