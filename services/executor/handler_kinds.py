"""Built-in handler kinds an operator configures: an HTTP webhook and a Kafka message.

Both send a job's payload only to destinations the operator allow-listed; a job names the
handler, never the destination.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Mapping
from email.utils import parsedate_to_datetime
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from services.executor.context import HandlerContext
from services.executor.exceptions import HandlerTimeoutError, NonRetryableError, RetryableError
from streams.exceptions import ConfigurationError

_BODY_SNIPPET_BYTES = 200
_RETRYABLE_4XX = frozenset({408, 429})


def check_http_url(url: str, allowed_hosts: Collection[str]) -> str:
    """``url`` if it is http(s) to an allow-listed host (exact, case-insensitive match).

    The host is taken from the parsed URL, so ``http://allowed@evil.example`` is refused.
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme not in ("http", "https") or not host:
        raise ConfigurationError(f"handler URL {url!r} must be an absolute http:// or https:// URL")
    allowed = {h.lower() for h in allowed_hosts}
    if host not in allowed:
        raise ConfigurationError(
            f"handler URL {url!r} points at host {host!r}, which is not in the executor's HTTP "
            f"allow-list ({', '.join(sorted(allowed)) or 'empty'}); add the host to the "
            "allow-list or fix the URL"
        )
    return url


def parse_retry_after_s(value: str | None, *, now_epoch_s: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    now = time.time() if now_epoch_s is None else now_epoch_s
    return max(0.0, when.timestamp() - now)


def raise_for_http_status(
    status: int, *, url: str, body_snippet: str = "", retry_after_s: float | None = None
) -> None:
    """Map a webhook's HTTP status to an outcome: return on 2xx, raise a HandlerError else.

    4xx is non-retryable except 408 and 429; 5xx is retryable. Redirects are not followed
    (the target could be outside the allow-list), so 3xx is non-retryable.
    """
    if 200 <= status < 300:
        return
    detail = f"webhook {url} answered HTTP {status}"
    if body_snippet:
        detail += f": {body_snippet}"
    if status in _RETRYABLE_4XX or status >= 500:
        raise RetryableError(detail, retry_after_s=retry_after_s)
    if 300 <= status < 400:
        raise NonRetryableError(f"{detail} (redirects are not followed; configure the final URL)")
    raise NonRetryableError(detail)


class HttpHandler:
    """POSTs the payload to one allow-listed URL; the execution id is the Idempotency-Key."""

    def __init__(
        self,
        url: str,
        client: Callable[[], httpx.AsyncClient],
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self._client = client
        self._headers = {"Content-Type": "application/octet-stream", **(headers or {})}

    async def __call__(self, ctx: HandlerContext) -> None:
        remaining_s = ctx.remaining_s()
        if remaining_s <= 0:
            raise HandlerTimeoutError(f"deadline passed before calling webhook {self.url}")
        headers = {
            **self._headers,
            "Idempotency-Key": ctx.execution_id,
            "X-Kafkron-Execution-Id": ctx.execution_id,
            "X-Kafkron-Job-Id": ctx.job_id,
            "X-Kafkron-Attempt": str(ctx.attempt),
            "X-Kafkron-Deadline-Epoch-Ms": str(ctx.deadline_epoch_ms),
        }
        try:
            async with asyncio.timeout(remaining_s):
                await self._post(ctx.payload, headers, remaining_s)
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise HandlerTimeoutError(
                f"webhook {self.url} did not answer within the attempt's deadline"
            ) from exc
        except httpx.TransportError as exc:
            raise RetryableError(f"webhook {self.url} unreachable: {exc!r}") from exc

    async def _post(self, payload: bytes, headers: dict[str, str], timeout_s: float) -> None:
        request = self._client().stream(
            "POST",
            self.url,
            content=payload,
            headers=headers,
            timeout=timeout_s,
            follow_redirects=False,
        )
        async with request as response:
            snippet = ""
            if not response.is_success:
                snippet = await _read_snippet(response)
            raise_for_http_status(
                response.status_code,
                url=self.url,
                body_snippet=snippet,
                retry_after_s=parse_retry_after_s(response.headers.get("Retry-After")),
            )


async def _read_snippet(response: httpx.Response) -> str:
    data = b""
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= _BODY_SNIPPET_BYTES:
            break
    return data[:_BODY_SNIPPET_BYTES].decode("utf-8", "replace").strip()


class Produce(Protocol):
    """Enqueue one record. Called with keywords, so ``confluent_kafka.Producer.produce`` fits."""

    def __call__(self, topic: str, *, key: bytes, value: bytes) -> None: ...


class KafkaHandler:
    """Produces the payload to one allow-listed topic, keyed by the execution id.

    Keying by ``execution_id`` lets consumers of the topic drop duplicates of an execution.
    ``produce`` only enqueues: the Kafka loop must flush (or commit its transaction) before
    it records the attempt as durable.
    """

    def __init__(self, topic: str, produce: Produce) -> None:
        self.topic = topic
        self._produce = produce

    async def __call__(self, ctx: HandlerContext) -> None:
        try:
            self._produce(self.topic, key=ctx.execution_id.encode(), value=ctx.payload)
        except BufferError as exc:
            raise RetryableError(
                f"producer queue full while producing to {self.topic}", retry_after_s=1.0
            ) from exc
        except Exception as exc:
            raise RetryableError(f"producing to {self.topic} failed: {exc!r}") from exc


def check_topic(topic: str, allowed_topics: Collection[str]) -> str:
    """``topic`` if the operator allow-listed it (exact full topic name)."""
    if topic not in allowed_topics:
        raise ConfigurationError(
            f"handler topic {topic!r} is not in the executor's Kafka topic allow-list "
            f"({', '.join(sorted(allowed_topics)) or 'empty'}); add it or fix the handler config"
        )
    return topic
