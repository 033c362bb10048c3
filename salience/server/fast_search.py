"""The service's busiest request, ``POST /indexes/{name}/search`` on a BM25 (or local sharded)
index, answered by a small ASGI middleware instead of FastAPI's routing, dependency solving and
body parsing, which cost as much as the search itself under many clients. The request is validated by the same pydantic model and answered
by the same code as the route (:func:`salience.server.routes.prepared_search`); anything else
(another endpoint, a hybrid or dense search, a body that is not valid, a refused request, an
error) goes to the full application with the body handed on, which answers it, errors included,
as it always does."""

import re

from salience.server.routes import prepared_search

__all__ = ["FastSearch"]

_SEARCH = re.compile(r"/indexes/([^/]+)/search")


class FastSearch:
    def __init__(self, app, service):
        from salience.server.models import SearchRequest

        self.app, self.service, self.model = app, service, SearchRequest

    async def __call__(self, scope, receive, send):
        match = _SEARCH.fullmatch(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" else None
        content_type = dict(scope["headers"]).get(b"content-type", b"") if match else b""
        if match is None or content_type.split(b";")[0].strip().lower() != b"application/json":
            return await self.app(scope, receive, send)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: nobody to answer
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        try:
            answer, on_loop = prepared_search(self.service, match.group(1), self.model.model_validate_json(body))
            content = self.service.encode(answer()) if on_loop else None
        except Exception:  # noqa: BLE001 - refused, invalid or failed: the application answers and says why
            content = None
        if content is None:
            return await self.app(scope, _replayed(body, receive), send)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(content))]})
        await send({"type": "http.response.body", "body": content})


def _replayed(body: bytes, receive):
    """``receive`` with the body already read handed on first."""
    handed = False

    async def replay():
        nonlocal handed
        if not handed:
            handed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
