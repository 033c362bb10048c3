"""What the service refuses and how: :class:`Limits` (what one request may ask),
:class:`APIError` (an answer with a status, a stable code and the field), the handlers that turn
every error into JSON (never a stack trace), and the middleware that bounds a request's body."""

import logging
from dataclasses import asdict, dataclass

from salience.exceptions import DuplicateIdError, IdMismatchError, InvalidParameterError, SalienceError, ShardUnavailableError

__all__ = ["Limits", "APIError", "install_error_handlers", "BodyLimit"]

log = logging.getLogger("salience.server")


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


def install_error_handlers(app) -> None:
    """Every error becomes ``{"error": {"code", "message", "field"}}`` with a stable code."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException

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
        if isinstance(err, ShardUnavailableError):
            return error(503, "shard_unavailable", str(err) + " (send allow_partial: true for the other shards' "
                         "results)", "allow_partial")
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


class BodyLimit:
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
