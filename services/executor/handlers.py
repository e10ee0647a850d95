"""The handlers an executor may run, registered by its operator under validated names.

Sources: Python callables (directly, from the ``kafkron.handlers`` entry-point group, or
from ``"name=package.module:attr"`` config specs) and the built-in ``http`` and ``kafka``
kinds of :mod:`services.executor.handler_kinds`. A job only names a handler.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from importlib.metadata import entry_points

import httpx

from services.executor.context import HandlerContext
from services.executor.exceptions import HandlerNotFoundError
from services.executor.handler_kinds import (
    HttpHandler,
    KafkaHandler,
    Produce,
    check_http_url,
    check_topic,
)
from streams.exceptions import ConfigurationError
from streams.identity import HANDLER_NAME_MAX_LENGTH, HANDLER_NAME_PATTERN

ENTRY_POINT_GROUP = "kafkron.handlers"

_HANDLER_NAME_RE = re.compile(HANDLER_NAME_PATTERN)
_MODULE_PATH_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

HandlerFn = Callable[[HandlerContext], Awaitable[None] | None]
"""A handler: ``def h(ctx) -> None`` (runs in a thread) or ``async def h(ctx) -> None``."""


class HandlerKind(StrEnum):
    """Where a registered handler comes from."""

    PYTHON = "python"
    HTTP = "http"
    KAFKA = "kafka"


@dataclass(frozen=True, slots=True)
class RegisteredHandler:
    """A handler as the runner needs it: async-ness is decided once, at registration."""

    name: str
    fn: HandlerFn
    is_async: bool
    kind: HandlerKind
    source: str


def is_valid_handler_name(name: str) -> bool:
    """True when ``name`` matches :data:`HANDLER_NAME_PATTERN` and is not too long."""
    return len(name) <= HANDLER_NAME_MAX_LENGTH and _HANDLER_NAME_RE.fullmatch(name) is not None


def is_async_callable(fn: object) -> bool:
    """True for ``async def`` functions, partials of them and objects with ``async __call__``."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an async __call__ is what we look for
    return inspect.iscoroutinefunction(call)


class HandlerRegistry:
    """Name → handler for one executor; built at startup, read-only while consuming.

    ``allowed_http_hosts`` and ``allowed_kafka_topics`` are the operator's allow-lists for
    the built-in kinds. ``http_client`` is used by every ``http`` handler; without one, the
    registry creates one on first use and :meth:`aclose` closes it.
    """

    def __init__(
        self,
        *,
        allowed_http_hosts: Collection[str] = (),
        allowed_kafka_topics: Collection[str] = (),
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self._handlers: dict[str, RegisteredHandler] = {}
        self._allowed_http_hosts = frozenset(h.lower() for h in allowed_http_hosts)
        self._allowed_kafka_topics = frozenset(allowed_kafka_topics)
        self._http_client = http_client
        self._owns_http_client = http_client is None

    def register(
        self,
        name: str,
        fn: HandlerFn,
        *,
        kind: HandlerKind = HandlerKind.PYTHON,
        source: str = "code",
    ) -> RegisteredHandler:
        """Register ``fn`` under ``name``; a bad or duplicate name is a ConfigurationError."""
        if not is_valid_handler_name(name):
            raise ConfigurationError(
                f"invalid handler name {name!r}: use lowercase dotted words matching "
                f"{HANDLER_NAME_PATTERN} (at most {HANDLER_NAME_MAX_LENGTH} characters)"
            )
        if not callable(fn):
            raise ConfigurationError(f"handler {name!r} from {source} is not callable: {fn!r}")
        if name in self._handlers:
            raise ConfigurationError(
                f"handler {name!r} from {source} is already registered from "
                f"{self._handlers[name].source}; give one of them another name"
            )
        handler = RegisteredHandler(name, fn, is_async_callable(fn), kind, source)
        self._handlers[name] = handler
        return handler

    def resolve(self, name: str) -> RegisteredHandler:
        """The handler registered as ``name``; HandlerNotFoundError (non-retryable) if none."""
        try:
            return self._handlers[name]
        except KeyError:
            raise HandlerNotFoundError(name, self._handlers) from None

    def names(self) -> list[str]:
        """Registered handler names, sorted."""
        return sorted(self._handlers)

    def __contains__(self, name: object) -> bool:
        return name in self._handlers

    def __len__(self) -> int:
        return len(self._handlers)

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> list[str]:
        """Register every entry point of ``group`` (name = entry point name); return names."""
        loaded = []
        for ep in sorted(entry_points(group=group), key=lambda e: e.name):
            source = f"entry point {ep.name} = {ep.value} (group {group})"
            try:
                fn = ep.load()
            except Exception as exc:
                raise ConfigurationError(f"cannot load handler {source}: {exc!r}") from exc
            loaded.append(self.register(ep.name, fn, source=source).name)
        return loaded

    def load_spec(self, spec: str) -> RegisteredHandler:
        """Register a handler from a config string ``"name=package.module:attr"``."""
        name, sep, target = (part.strip() for part in spec.partition("="))
        module_name, colon, attr = target.partition(":")
        if not (sep and colon and _MODULE_PATH_RE.fullmatch(module_name)):
            raise ConfigurationError(
                f"handler spec {spec!r} must look like 'name=package.module:attr'"
            )
        if not _MODULE_PATH_RE.fullmatch(attr):
            raise ConfigurationError(f"handler spec {spec!r} has an invalid attribute {attr!r}")
        source = f"spec {spec!r}"
        try:
            obj: object = importlib.import_module(module_name)
            for part in attr.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as exc:
            raise ConfigurationError(f"cannot load handler {source}: {exc!r}") from exc
        return self.register(name, obj, source=source)  # type: ignore[arg-type]

    def load_specs(self, specs: Iterable[str]) -> list[str]:
        """Register every ``"name=package.module:attr"`` spec; return the names."""
        return [self.load_spec(spec).name for spec in specs]

    def register_http(
        self, name: str, url: str, *, headers: Mapping[str, str] | None = None
    ) -> RegisteredHandler:
        """An ``http`` handler POSTing the payload to ``url``, whose host must be allowed."""
        check_http_url(url, self._allowed_http_hosts)
        handler = HttpHandler(url, self._get_http_client, headers=headers)
        return self.register(name, handler, kind=HandlerKind.HTTP, source=f"http {url}")

    def register_kafka(self, name: str, topic: str, produce: Produce) -> RegisteredHandler:
        """A ``kafka`` handler producing the payload to ``topic``, which must be allowed."""
        check_topic(topic, self._allowed_kafka_topics)
        handler = KafkaHandler(topic, produce)
        return self.register(name, handler, kind=HandlerKind.KAFKA, source=f"kafka {topic}")

    def _get_http_client(self) -> httpx.AsyncClient:
        if self._http_client is None:
            self._http_client = httpx.AsyncClient(follow_redirects=False, trust_env=False)
        return self._http_client

    async def aclose(self) -> None:
        """Close the HTTP client if this registry created it."""
        if self._owns_http_client and self._http_client is not None:
            await self._http_client.aclose()
            self._http_client = None
