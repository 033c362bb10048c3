"""The HTTP service behind ``salience serve`` (``pip install 'salience[server]'``: FastAPI and
uvicorn).

Saved indexes (BM25 or dense, told apart by their manifests) are loaded at start; each is
served under the name of its folder, and both are written the same way. Reads go to the last
committed state of an index, an object no writer touches: a write works on a copy of it
(:meth:`salience.search.index.Index.copy`), commits it (the index's atomic manifest replace,
so it is durable when the request returns) and only then publishes it to readers, so a reader sees the state before a commit or after it, never half of one.
Writers to one index are serialised by a lock; writes need the API key (compared in constant
time, never logged) and are refused when the service was started without one.

Every error is JSON, ``{"error": {"code", "message", "field"}}`` with a stable ``code``; no
stack trace reaches a client (it goes to the server's log). Limits (body size, ``k``, query
and text length, batch size, time per request) are :class:`Limits`.
"""

import asyncio
import hmac
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from salience.exceptions import (DuplicateIdError, IdMismatchError, InvalidParameterError, MissingDependencyError,
                                 SalienceError)

__all__ = ["Limits", "ServedIndex", "create_app", "read_api_key"]

INSTALL = "pip install 'salience[server]'"
STATIC = Path(__file__).with_name("static")
log = logging.getLogger("salience.server")


def _require_fastapi() -> None:
    try:
        import fastapi  # noqa: F401
        import pydantic  # noqa: F401
    except ImportError as err:
        raise MissingDependencyError(f"the HTTP service needs FastAPI ({err.name} is missing): {INSTALL}") from None


@dataclass(frozen=True)
class Limits:
    """What one request may ask; beyond it the request is refused naming the field."""

    max_body_bytes: int = 1 << 20
    max_k: int = 1000
    max_query_chars: int = 1000
    max_text_chars: int = 100_000
    max_batch: int = 1000
    timeout_s: float = 10.0

    def __post_init__(self):
        for name, value in asdict(self).items():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise InvalidParameterError(f"limit {name} must be a positive number; got {value!r}.")


class APIError(Exception):
    """An error answered to the client as is: HTTP ``status``, stable ``code``, the ``field``."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.field = status, code, message, field


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


class ServedIndex:
    """One saved index: the committed state readers use, and a lock for its writers."""

    def __init__(self, path: str | os.PathLike):
        from salience.io.files import sweep_stale_temporaries
        from salience.search.dense import is_dense_folder

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


def _explained(engine, query: str, doc_id: str, document: dict) -> tuple[dict, dict]:
    """BM25's term contributions to ``doc_id``'s score, and for each indexed text field of
    ``document`` the character spans of the words whose terms contributed."""
    explanation = engine.explain(query, doc_id).to_dict()
    terms = {t["term"] for t in explanation["terms"] if t["contribution"] > 0}
    highlights = {field: [[start, end] for start, end, term in engine.tokenizer.spans(value) if term in terms]
                  for field, value in document.items() if field in engine.fields and isinstance(value, str)}
    return explanation, highlights


def create_app(indexes: Sequence[str | os.PathLike] = (), *, api_key: str | None = None, limits: Limits | None = None,
               cors_origins: Sequence[str] = (), judge: str = "index"):
    """The FastAPI application serving ``indexes`` (folders of saved indexes)."""
    _require_fastapi()
    import orjson
    from fastapi import Depends, FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import FileResponse, JSONResponse, Response
    from fastapi.staticfiles import StaticFiles
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException as StarletteHTTPException

    from salience.server.models import (AddRequest, DeleteRequest, ExplainRequest, FuseRequest, RerankRequest,
                                        SearchRequest, TextRequest)

    limits = limits or Limits()
    if judge not in ("index", "encoder"):
        raise InvalidParameterError(f"judge must be 'index' (the index's own scorer) or 'encoder'; got {judge!r}.")
    served: dict[str, ServedIndex] = {}
    for path in indexes:
        handle = ServedIndex(path)
        if handle.name in served:
            raise InvalidParameterError(f"two indexes are named {handle.name!r} ({served[handle.name].path} and "
                                        f"{handle.path}): serve folders with different names.")
        served[handle.name] = handle
    encoder_judge = None
    if judge == "encoder":
        from salience.search.lm_judges import EncoderJudge

        encoder_judge = EncoderJudge()
        encoder_judge.scores("warm", ["up"])  # the model loads now, before the service reports ready

    app = FastAPI(title="salience", version=_version(), description="Search, rank and find what matters.")
    app.state.indexes, app.state.limits = served, limits

    # -- errors: JSON with a stable code, never a trace ------------------------------------
    def error(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
        return JSONResponse({"error": {"code": code, "message": message, "field": field}}, status_code=status)

    @app.exception_handler(APIError)
    async def _api_error(request, err: APIError):
        return error(err.status, err.code, err.message, err.field)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, err: RequestValidationError):
        first = err.errors()[0] if err.errors() else {"loc": (), "msg": "invalid request"}
        loc = [str(part) for part in first.get("loc", ())]
        if loc and loc[0] in ("body", "query", "path", "header"):  # where it was, not which field
            loc = loc[1:]
        field = ".".join(loc) or None
        message = first.get("msg", "invalid request")
        if first.get("type") == "json_invalid":
            return error(400, "invalid_json", "the request body is not valid JSON.")
        return error(422, "invalid_field", f"{field or 'request'}: {message}", field)

    @app.exception_handler(SalienceError)
    async def _salience_error(request, err: SalienceError):
        if isinstance(err, DuplicateIdError):
            return error(409, "duplicate_id", str(err).strip("\"'"), "id")
        if isinstance(err, IdMismatchError):
            return error(404, "unknown_id", str(err).strip("\"'"), "id")
        return error(400, "invalid_input", str(err))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request, err: StarletteHTTPException):
        if err.status_code == 400:  # the only 400 starlette raises: a body it could not parse
            return error(400, "invalid_json", "the request body is not valid JSON (UTF-8, nested at most as deep as "
                         "a JSON parser allows).")
        codes = {404: "not_found", 405: "method_not_allowed"}
        return error(err.status_code, codes.get(err.status_code, "http_error"), str(err.detail))

    @app.exception_handler(Exception)
    async def _unexpected(request, err: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error(500, "internal_error", "the server failed on this request; its log has the details.")

    app.add_middleware(_BodyLimit, limit=limits.max_body_bytes)
    if cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "X-API-Key", "Content-Type"])

    def reply(result) -> Response:
        """Serialised by orjson straight into the response: FastAPI's own encoder walks every
        value in Python, most of the time of a top-100 answer."""
        return Response(orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS),
                        media_type="application/json")

    async def run(fn: Callable, *args) -> Response:
        """``fn(*args)`` in the thread pool, answered 504 after ``limits.timeout_s``."""
        try:
            result = await asyncio.wait_for(run_in_threadpool(fn, *args), timeout=limits.timeout_s)
        except asyncio.TimeoutError:
            raise APIError(504, "timeout", f"the request took longer than {limits.timeout_s:g} s.") from None
        return reply(result)

    def index_named(name: str) -> ServedIndex:
        if name not in served:
            known = ", ".join(sorted(served)) or "none"
            raise APIError(404, "unknown_index", f"no index named {name[:100]!r} is served (served: {known}).", "name")
        return served[name]

    def within(field: str, value, limit) -> None:
        if (len(value) if isinstance(value, (str, list, dict)) else value) > limit:
            unit = "characters" if isinstance(value, str) else ("items" if isinstance(value, (list, dict)) else "")
            raise APIError(422, "over_limit", f"{field} is over this service's limit of {limit} {unit}".rstrip() + ".",
                           field)

    def check_key(request: Request) -> None:
        """Route dependency of the writes: FastAPI runs it before it validates the body, so a
        request without the key is told so (401) whatever its body."""
        if api_key is None:
            raise APIError(403, "writes_disabled", "this service was started without --api-key-file: writes are off.")
        given = request.headers.get("x-api-key")
        authorization = request.headers.get("authorization", "")
        if given is None and authorization.lower().startswith("bearer "):
            given = authorization[7:].strip()
        if not given:
            raise APIError(401, "missing_api_key", "writes need the API key: send 'Authorization: Bearer KEY' or "
                           "'X-API-Key: KEY'.", "authorization")
        if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), api_key.encode("utf-8")):
            raise APIError(401, "wrong_api_key", "the API key is wrong.", "authorization")

    # -- read endpoints -----------------------------------------------------------------------
    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/health")
    async def health():
        return {"status": "ok", "version": _version(), "indexes": [h.describe() for h in served.values()]}

    @app.get("/methods")
    async def methods(domain: str | None = None):
        from salience.core.base import method_rows

        try:
            return {"methods": method_rows(domain)}
        except SalienceError as err:
            raise APIError(404, "unknown_domain", str(err), "domain") from None

    @app.get("/limits")
    async def show_limits():
        return asdict(limits)

    @app.get("/indexes")
    async def list_indexes():
        return {"indexes": [h.describe() for h in served.values()]}

    @app.post("/indexes/{name}/search")
    async def search(name: str, body: SearchRequest):
        handle = index_named(name)
        within("query", body.query, limits.max_query_chars)
        within("k", body.k, limits.max_k)
        engine, generation = handle.snapshot  # one committed state for the whole request
        searcher = engine
        if body.hybrid is not None:
            dense = index_named(body.hybrid.dense)
            if handle.kind != "bm25" or dense.kind != "dense":
                raise APIError(422, "invalid_field", "hybrid search fuses a BM25 index (the path) with a dense index "
                               "(hybrid.dense).", "hybrid.dense")
            from salience.search import Hybrid

            searcher = (Hybrid(engine, dense.reader, method="rrf") if body.hybrid.fusion == "rrf" else
                        Hybrid(engine, dense.reader, method="wsum", normalize=body.hybrid.fusion,
                               weight=float(body.hybrid.weight)))
        if body.explain and handle.kind != "bm25":
            raise APIError(422, "invalid_field", "explain shows BM25 term contributions: search a BM25 index.",
                           "explain")

        def answer():
            results = searcher.search(body.query, k=body.k, where=body.where)
            rows = []
            for rank, (doc_id, score) in enumerate(results, start=1):
                row = {"rank": rank, "id": doc_id, "score": score}
                if getattr(engine, "store_documents", False):
                    row["document"] = engine.document(doc_id)
                if body.explain:
                    row["explanation"], row["highlights"] = _explained(engine, body.query, doc_id,
                                                                       row.get("document", {}))
                rows.append(row)
            return {"index": name, "generation": generation, "query": body.query, "results": rows}

        if body.hybrid is None and handle.kind == "bm25":
            # BM25 over a bounded query and k takes well under a millisecond: answered on the event
            # loop, where a thread pool hop would cost more, and its threads would take turns
            # with the loop for the GIL (tail latency under load)
            return reply(answer())
        return await run(answer)  # a dense or hybrid search encodes the query: off the loop

    @app.post("/indexes/{name}/explain")
    async def explain(name: str, body: ExplainRequest):
        handle = index_named(name)
        within("query", body.query, limits.max_query_chars)
        if handle.kind != "bm25":
            raise APIError(422, "invalid_field", "explain shows BM25 term contributions: use a BM25 index.", "name")
        engine = handle.reader
        document = engine.document(body.id) if engine.store_documents else {}
        explanation, highlights = _explained(engine, body.query, body.id, document)
        return {**explanation, "highlights": highlights}

    @app.post("/rerank")
    async def rerank(body: RerankRequest):
        within("query", body.query, limits.max_query_chars)
        if (body.passages is None) == (body.ids is None):
            raise APIError(422, "invalid_field", "send passages (id and text) or ids of the index, one of them.",
                           "passages")
        items = body.passages if body.passages is not None else body.ids
        field = "passages" if body.passages is not None else "ids"
        within(field, items, limits.max_batch)
        if body.passages is not None:
            for i, p in enumerate(body.passages):
                within(f"passages.{i}.text", p.text, limits.max_text_chars)
        if body.index is None and len(served) != 1 and (body.ids is not None or encoder_judge is None):
            raise APIError(422, "invalid_field", f"name the index whose scorer judges ({', '.join(served)}).", "index")
        handle = index_named(body.index) if body.index is not None else (next(iter(served.values())) if served else None)

        def answer():
            if body.ids is not None:
                scores = handle.reader.score(body.query, body.ids)
                ids, values, judged_by = scores.ids, scores.values, handle.name
            else:
                ids = [p.id for p in body.passages]
                texts = [p.text for p in body.passages]
                if encoder_judge is not None:
                    values, judged_by = encoder_judge.scores(body.query, texts), "all-MiniLM-L6-v2"
                elif handle is not None and handle.kind == "bm25":
                    values, judged_by = handle.reader.score_texts(body.query, texts), handle.name
                else:
                    raise APIError(422, "invalid_field", "scoring posted texts needs a BM25 index or --judge encoder.",
                                   "index")
            order = sorted(range(len(ids)), key=lambda i: (-float(values[i]), i))
            return {"judge": judged_by, "results": [{"rank": r, "id": ids[i], "score": float(values[i])}
                                                    for r, i in enumerate(order, start=1)]}

        return await run(answer)

    @app.post("/keyphrases")
    async def keyphrases(body: TextRequest):
        within("text", body.text, limits.max_text_chars)
        within("k", body.k, limits.max_k)
        from salience.keywords import extract_keyphrases

        def answer():
            phrases = extract_keyphrases(body.text, k=body.k, method=body.method or "yake", language=body.language)
            return {"method": body.method or "yake", "keyphrases": [{"phrase": p, "score": v} for p, v in phrases]}

        return await run(answer)

    @app.post("/summary")
    async def summary(body: TextRequest):
        within("text", body.text, limits.max_text_chars)
        within("sentences", body.sentences, limits.max_k)
        from salience.summarize import summarize
        from salience.text.sentences import split_sentences

        def answer():
            sentences = split_sentences(body.text)
            if not sentences:
                raise APIError(422, "invalid_field", "the text has no sentences.", "text")
            result = summarize([s.text for s in sentences], sentences=body.sentences, method=body.method or "lexrank",
                               language=body.language)
            chosen = set(result.indices)
            weight = dict(zip(result.scores.ids, result.scores.values))
            return {"method": body.method or "lexrank", "summary": result.text,
                    "sentences": [{"index": i, "text": s.text, "start": s.start, "end": s.end,
                                   "score": float(weight.get(i, 0.0)), "selected": i in chosen}
                                  for i, s in enumerate(sentences)]}

        return await run(answer)

    @app.post("/fuse")
    async def fuse(body: FuseRequest):
        within("runs", body.runs, limits.max_batch)
        for i, run_ in enumerate(body.runs):
            within(f"runs.{i}", run_, limits.max_batch)
            for subject, ranking in run_.items():
                within(f"runs.{i}.{subject[:40]}", ranking, limits.max_batch * 10)
        if body.k is not None:
            within("k", body.k, limits.max_k)
        from salience import fuse as fuse_runs

        def answer():
            fused = fuse_runs(body.runs, method=body.method, normalize=body.normalize, weights=body.weights,
                              missing_subjects="empty")
            return {"method": body.method, "results": {q: dict(list(s.sorted())[: body.k]) for q, s in fused.items()}}

        return await run(answer)

    # -- write endpoints (API key) ----------------------------------------------------------------
    @app.post("/indexes/{name}/documents", dependencies=[Depends(check_key)])
    async def add_documents(name: str, body: AddRequest):
        handle = index_named(name)
        within("documents", body.documents, limits.max_batch)
        documents = [d.model_dump() for d in body.documents]
        for i, doc in enumerate(documents):
            within(f"documents.{i}", "".join(v for v in doc.values() if isinstance(v, str)), limits.max_text_chars)

        def change(index):
            index.add(documents)
            return {"added": len(documents)}

        return await run(lambda: handle.write(change, commit=body.commit))

    @app.post("/indexes/{name}/delete", dependencies=[Depends(check_key)])
    async def delete_documents(name: str, body: DeleteRequest):
        handle = index_named(name)
        within("ids", body.ids, limits.max_batch)

        def change(index):
            index.delete(body.ids)  # an unknown id: 404 naming it, nothing deleted
            return {"deleted": len(set(body.ids))}

        return await run(lambda: handle.write(change, commit=body.commit))

    @app.post("/indexes/{name}/commit", dependencies=[Depends(check_key)])
    async def commit(name: str):
        handle = index_named(name)
        return await run(handle.commit)

    @app.post("/indexes/{name}/merge", dependencies=[Depends(check_key)])
    async def merge(name: str):
        handle = index_named(name)
        return await run(handle.merge)

    return app


class _BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is answered 413 (by its
    Content-Length before reading, or as it streams in)."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            return await self._refuse(send)
        seen = 0
        over = refused = started = False

        async def counting_receive():
            nonlocal seen, over
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    over = True
                    raise _TooLarge
            return message

        async def refusing_send(message):
            # the app may catch the error while it parses the body and answer 400 of its own:
            # a body over the limit is answered 413 whatever the app would have said
            nonlocal refused, started
            if not over or started:  # an answer already begun goes on as it is
                started = started or message["type"] == "http.response.start"
                await send(message)
            elif not refused:
                refused = True
                await self._refuse(send)

        try:
            await self.app(scope, counting_receive, refusing_send)
        except _TooLarge:
            if not refused and not started:
                await self._refuse(send)

    async def _refuse(self, send):
        import json

        body = json.dumps({"error": {"code": "body_too_large", "message": f"the request body is over this service's "
                                     f"limit of {self.limit} bytes.", "field": None}}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class _TooLarge(Exception):
    pass


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("salience")
    except Exception:  # noqa: BLE001 (not installed: running from a source tree)
        return "0+unknown"


def serve(indexes: Sequence[str | os.PathLike], *, host: str = "127.0.0.1", port: int = 8080,
          api_key_file: str | None = None, limits: Limits | None = None, cors_origins: Sequence[str] = (),
          judge: str = "index", log_level: str = "info") -> None:
    """Run the service until interrupted (uvicorn, one process)."""
    try:
        import uvicorn
    except ImportError:
        raise MissingDependencyError(f"the HTTP service needs uvicorn: {INSTALL}") from None
    api_key = read_api_key(api_key_file) if api_key_file else None
    started = time.perf_counter()
    app = create_app(indexes, api_key=api_key, limits=limits, cors_origins=cors_origins, judge=judge)
    log.info("loaded %d indexes in %.1f s", len(app.state.indexes), time.perf_counter() - started)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)
