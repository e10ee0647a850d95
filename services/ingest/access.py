"""Who is calling the API, and what of the jobs they may see (issue 21, access).

With a tokens file (``KAFKRON_INGEST_TOKENS_FILE``, :mod:`streams.api_tokens`) every request
but the public ones (:data:`PUBLIC_PATHS` and static files) needs ``Authorization: Bearer
<token>``; a missing, malformed, unknown or revoked token answers 401 with
``WWW-Authenticate: Bearer``. :class:`BearerAuth` resolves the token to a :class:`Caller`
and puts it in the ASGI scope; routes take it with ``Depends(caller_of)``, and a test fails
on any route that neither does nor is public. Without a tokens file every caller is the
admin, and the API only listens on loopback (:func:`bind_refusal`).

A tenant's caller sees only its tenant's jobs, their executions, DAG runs and dead letters.
Another tenant's job answers exactly what a missing job answers (404 with the same body,
at the same point of the request), so a tenant cannot even learn that it exists. The tenant
of a created job is the token's: a body naming another tenant is a 422 at ``tenant``
(:func:`bind_tenant`).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

import orjson
from fastapi import Depends, HTTPException, Request
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from services.ingest.dag_runs import ViewReads
from services.ingest.exceptions import JobRequestError
from streams.api_tokens import TokenTable

log = logging.getLogger(__name__)

CALLER_KEY = "kafkron.caller"
"""Where :class:`BearerAuth` leaves the request's :class:`Caller` in the ASGI scope."""

PUBLIC_PATHS = frozenset(
    {
        "/",
        "/healthz",
        "/metrics",
        "/docs",
        "/docs/oauth2-redirect",
        "/redoc",
        "/openapi.json",
        "/ui",
        "/ui/",
    }
)
"""Paths anyone may call: health, metrics, the API's documentation and the dashboard's page
(``/`` leads to it).
Static files (``StaticFiles`` mounts) are public too; everything else needs a token."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: one tenant's token, or the admin (``tenant`` None: every job)."""

    tenant: str | None
    token_id: str | None = None

    def sees(self, tenant: Any) -> bool:
        """True when this caller may see a record of ``tenant``."""
        return self.tenant is None or self.tenant == tenant

    def sees_job(self, job: Mapping[str, Any] | None) -> bool:
        """True when ``job`` (a Job record, or None) exists and is this caller's."""
        return job is not None and self.sees(job.get("tenant"))


ADMIN = Caller(None)
"""Every caller when no tokens are configured."""


async def caller_of(request: Request) -> Caller:
    """The request's caller (a FastAPI dependency): every route that is not public takes it.
    A coroutine, so that resolving it costs no hop to the threadpool (an ``async`` route
    such as ``GET /api/jobs`` then runs without one)."""
    caller = request.scope.get(CALLER_KEY)
    if not isinstance(caller, Caller):  # no BearerAuth in front: refuse rather than open up
        raise RuntimeError("the API has no BearerAuth middleware in front of its routes")
    return caller


CallerOf = Annotated[Caller, Depends(caller_of)]
"""A route's parameter ``caller: CallerOf`` gets the request's caller."""


def require_admin(caller: Caller, what: str) -> None:
    """403 for a tenant's token on a route about the whole cluster (``what``), not jobs: its
    existence is no secret, and the answer says which token to use."""
    if caller.tenant is not None:
        raise HTTPException(403, f"{what} is for an admin token; this token sees one tenant")


def static_prefixes(routes: Iterable[BaseRoute]) -> tuple[str, ...]:
    """The paths of the app's public mounts: static files, or an app mounted at a public
    path (e.g. Prometheus' at ``/metrics``); never the root, which would open everything."""
    return tuple(
        route.path
        for route in routes
        if isinstance(route, Mount)
        and route.path
        and (isinstance(route.app, StaticFiles) or route.path in PUBLIC_PATHS)
    )


def is_public(path: str, static: tuple[str, ...]) -> bool:
    """True for a path anyone may call (:data:`PUBLIC_PATHS`, or under a static mount)."""
    if path in PUBLIC_PATHS:
        return True
    return any(path.startswith(prefix + "/") for prefix in static)


_UNAUTHORIZED = orjson.dumps(
    {
        "detail": "this API needs a bearer token: send 'Authorization: Bearer <token>' (an "
        "operator makes one with 'kafkron token add'; the command line takes --token or "
        "KAFKRON_TOKEN)"
    }
)
_INVALID = orjson.dumps(
    {
        "detail": "the bearer token is not valid (malformed, unknown or revoked); ask an "
        "operator for a token ('kafkron token add')"
    }
)


class BearerAuth:
    """ASGI middleware: resolve ``Authorization: Bearer`` to a :class:`Caller` or answer 401.

    ``tokens`` None: no tokens configured, every caller is :data:`ADMIN`. ``routes`` gives
    the app's routes (read at the first request, once every route is installed) to find its
    static mounts. A scope that already has a caller (an outer BearerAuth) passes as it is.
    """

    def __init__(
        self,
        app: ASGIApp,
        tokens: TokenTable | None,
        routes: Callable[[], Iterable[BaseRoute]] = tuple,
    ) -> None:
        self.app, self._tokens, self._routes = app, tokens, routes
        self._static: tuple[str, ...] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or CALLER_KEY in scope:
            await self.app(scope, receive, send)
            return
        if self._tokens is None:
            scope[CALLER_KEY] = ADMIN
            await self.app(scope, receive, send)
            return
        if self._static is None:
            self._static = static_prefixes(self._routes())
        if is_public(scope["path"], self._static):
            await self.app(scope, receive, send)
            return
        token = bearer_token(scope)
        grant = None if token is None else self._tokens.grant_of(token)
        if grant is None:
            await _unauthorized(send, invalid=token is not None)
            return
        scope[CALLER_KEY] = Caller(grant.tenant, grant.token_id)
        await self.app(scope, receive, send)


def bearer_token(scope: Scope) -> str | None:
    """The token of the request's ``Authorization: Bearer`` header, or None."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = bytes(value).decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


async def _unauthorized(send: Send, *, invalid: bool) -> None:
    challenge = b'Bearer realm="kafkron"'
    if invalid:
        challenge += b', error="invalid_token"'
    body = _INVALID if invalid else _UNAUTHORIZED
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", challenge),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def scope_caller(scope: Scope) -> Caller | None:
    """The caller :class:`BearerAuth` put in ``scope`` (None when none ran)."""
    caller = scope.get(CALLER_KEY)
    return caller if isinstance(caller, Caller) else None


_MISSING = object()


def bind_tenant(job: Any, caller: Caller) -> Any:
    """A create request with the caller's tenant: set when the body leaves ``tenant`` out,
    a ``JobRequestError`` at ``tenant`` when it names another. The admin's body is kept.

    ``job`` is the freshly decoded request body, changed in place."""
    if caller.tenant is None or type(job) is not dict:
        return job  # a body that is not an object: validation names what is wrong
    given = job.get("tenant", _MISSING)
    if given is _MISSING:
        job["tenant"] = caller.tenant
    elif given != caller.tenant:
        raise JobRequestError.at(
            ["tenant"],
            f"this token creates jobs of tenant {caller.tenant!r} only; leave tenant out "
            "(a job's tenant comes from the token) or use a token of that tenant",
            given,
        )
    return job


def bind_refusal(host: str, tokens_configured: bool) -> str | None:
    """Why the API must not listen on ``host``: without tokens only loopback is allowed."""
    if tokens_configured or is_loopback(host):
        return None
    return (
        f"KAFKRON_INGEST_HTTP_HOST={host!r} without KAFKRON_INGEST_TOKENS_FILE: the API would "
        "let anyone who reaches it read, cancel and replay every job. Create tokens with "
        "'kafkron token add --tenant NAME' (or --admin) and set KAFKRON_INGEST_TOKENS_FILE "
        "to that file, or listen on 127.0.0.1"
    )


def is_loopback(host: str) -> bool:
    """True for a loopback address (127.0.0.0/8, ::1) or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name could resolve to anything


def tenant_reads(reads: ViewReads, caller: Caller) -> ViewReads:
    """``reads`` as ``caller`` may see them: another tenant's job is unknown, has no
    executions and is no dependent (DAG edges never cross tenants, see
    :mod:`services.ingest.dag_admission`; this holds for jobs written before that rule)."""
    if caller.tenant is None:
        return reads

    def job(job_id: str) -> dict[str, Any] | None:
        found = reads.job(job_id)
        return found if caller.sees_job(found) else None

    def executions(job_id: str) -> list[dict[str, Any]]:
        return reads.executions(job_id) if job(job_id) is not None else []

    def dependents(job_id: str, limit: int) -> list[str]:
        return [d for d in reads.dependents(job_id, limit) if job(d) is not None]

    return ViewReads(job, executions, dependents, reads.recent_limit)
