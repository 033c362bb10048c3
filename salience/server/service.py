"""What every endpoint shares: the served indexes, the limits, the API key and the optional
encoder judge, and the helpers that answer (orjson), run work off the event loop with a time
limit, look an index up by name and check a field against its limit."""

import asyncio
import hmac
from dataclasses import dataclass, field
from typing import Any, Callable

from salience.extras import require
from salience.server.errors import APIError, Limits
from salience.server.indexes import ServedIndex

__all__ = ["Service"]

# the writes' dependency is annotated with starlette's Request, FastAPI's own dependency
Request = require("starlette.requests", "server", "The HTTP service").Request


@dataclass
class Service:
    served: dict = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    api_key: str | None = None
    passage_judge: Any = None  # what /rerank scores posted passages with (None: the index's scorer)
    passage_judge_name: str | None = None
    language_model: Any = None  # (model, tokenizer) of --lm: what /verify's passages are answered by
    language_model_name: str | None = None

    def reply(self, result):
        """Serialised by orjson straight into the response: FastAPI's own encoder walks every
        value in Python, most of the time of a top-100 answer."""
        from fastapi.responses import Response

        return Response(self.encode(result), media_type="application/json")

    @staticmethod
    def encode(result) -> bytes:
        import orjson

        return orjson.dumps(result, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)

    async def run(self, fn: Callable, *args):
        """``fn(*args)`` in the thread pool, answered 504 after ``limits.timeout_s``."""
        from starlette.concurrency import run_in_threadpool

        try:
            result = await asyncio.wait_for(run_in_threadpool(fn, *args), timeout=self.limits.timeout_s)
        except asyncio.TimeoutError:
            raise APIError(504, "timeout", f"the request took longer than {self.limits.timeout_s:g} s.") from None
        return self.reply(result)

    def index_named(self, name: str) -> ServedIndex:
        if name not in self.served:
            known = ", ".join(sorted(self.served)) or "none"
            raise APIError(404, "unknown_index", f"no index named {name[:100]!r} is served (served: {known}).", "name")
        return self.served[name]

    def within(self, field: str, value, limit) -> None:
        if (len(value) if isinstance(value, (str, list, dict)) else value) > limit:
            unit = "characters" if isinstance(value, str) else ("items" if isinstance(value, (list, dict)) else "")
            raise APIError(422, "over_limit", f"{field} is over this service's limit of {limit} {unit}".rstrip() + ".",
                           field)

    def check_key(self, request: Request) -> None:
        """Route dependency of the writes (and :class:`KeyFirst` before any body is read)."""
        problem = self.key_problem(request.headers)
        if problem is not None:
            raise problem

    def key_problem(self, headers) -> APIError | None:
        """Why a write with these headers (lower-case names) is refused, or None."""
        if self.api_key is None:
            return APIError(403, "writes_disabled", "this service was started without --api-key-file: writes are off.")
        given = headers.get("x-api-key")
        authorization = headers.get("authorization", "")
        if given is None and authorization.lower().startswith("bearer "):
            given = authorization[7:].strip()
        if not given:
            return APIError(401, "missing_api_key", "writes need the API key: send 'Authorization: Bearer KEY' or "
                            "'X-API-Key: KEY'.", "authorization")
        if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self.api_key.encode("utf-8")):
            return APIError(401, "wrong_api_key", "the API key is wrong.", "authorization")
        return None


class KeyFirst:
    """ASGI middleware: a write without the right API key is answered 401 (or 403 where writes
    are off) before its body is read or parsed, whatever the body holds. ``writes``: the write
    routes' path patterns (read off the write router, not listed by hand)."""

    def __init__(self, app, service: Service, writes):
        self.app, self.service, self.writes = app, service, list(writes)

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("method") == "POST" and any(p.match(scope["path"]) for p in self.writes):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
            problem = self.service.key_problem(headers)
            if problem is not None:
                import json

                body = json.dumps({"error": {"code": problem.code, "message": problem.message,
                                             "field": problem.field}}).encode("utf-8")
                await send({"type": "http.response.start", "status": problem.status,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
