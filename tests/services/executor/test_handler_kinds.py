from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from services.executor.exceptions import HandlerTimeoutError, NonRetryableError, RetryableError
from services.executor.handler_kinds import (
    check_http_url,
    parse_retry_after_s,
    raise_for_http_status,
)
from services.executor.handlers import HandlerKind, HandlerRegistry
from services.executor.runner import RunStatus, run_handler
from services.executor.sync_pool import SyncHandlerPool
from streams.exceptions import ConfigurationError

from .support import new_ctx, run


class Webhook(BaseHTTPRequestHandler):
    """Answers POST /status/<code>, /slow/<ms>, /redirect and records every request."""

    received: list[dict[str, Any]]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.received.append(  # type: ignore[attr-defined]
            {"path": self.path, "headers": dict(self.headers), "body": body}
        )
        parts = self.path.strip("/").split("/")
        if parts[0] == "slow":
            time.sleep(int(parts[1]) / 1000)
            self._answer(200)
        elif parts[0] == "redirect":
            self._answer(302, {"Location": "/status/200"})
        else:
            code = int(parts[1])
            self._answer(code, {"Retry-After": "7"} if code in (429, 503) else {}, b"nope " * 100)

    def _answer(self, code: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        try:
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up at its deadline, as the test wanted

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Webhook)
    httpd.received = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def base_url(httpd: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{httpd.server_address[1]}"


async def call_webhook(url: str, timeout_s: float = 5.0, **ctx_fields: Any) -> None:
    registry = HandlerRegistry(allowed_http_hosts=["127.0.0.1"])
    try:
        handler = registry.register_http("hooks.test", url, headers={"X-Team": "ops"})
        assert handler.kind is HandlerKind.HTTP and handler.is_async
        result = handler.fn(new_ctx(timeout_s=timeout_s, **ctx_fields))
        assert result is not None
        await result
    finally:
        await registry.aclose()


def test_posts_the_payload_with_the_execution_id_as_idempotency_key(
    server: ThreadingHTTPServer,
) -> None:
    run(call_webhook(f"{base_url(server)}/status/204", payload=b"\x00data", attempt=2))
    [request] = server.received  # type: ignore[attr-defined]
    assert request["body"] == b"\x00data"
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert headers["idempotency-key"] == "job-1@1700000000000"
    assert headers["x-kafkron-job-id"] == "job-1"
    assert headers["x-kafkron-attempt"] == "2"
    assert headers["x-team"] == "ops"
    assert headers["content-type"] == "application/octet-stream"


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410, 422])
def test_client_errors_are_not_retryable(server: ThreadingHTTPServer, code: int) -> None:
    with pytest.raises(NonRetryableError, match=f"HTTP {code}: nope"):
        run(call_webhook(f"{base_url(server)}/status/{code}"))


@pytest.mark.parametrize("code", [408, 429, 500, 502, 503])
def test_server_errors_408_and_429_are_retryable(server: ThreadingHTTPServer, code: int) -> None:
    with pytest.raises(RetryableError, match=f"HTTP {code}") as info:
        run(call_webhook(f"{base_url(server)}/status/{code}"))
    assert info.value.retry_after_s == (7.0 if code in (429, 503) else None)


def test_redirects_are_not_followed(server: ThreadingHTTPServer) -> None:
    with pytest.raises(NonRetryableError, match="redirects are not followed"):
        run(call_webhook(f"{base_url(server)}/redirect"))
    assert [r["path"] for r in server.received] == ["/redirect"]  # type: ignore[attr-defined]


def test_connection_refused_is_retryable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(RetryableError, match="unreachable"):
        run(call_webhook(f"http://127.0.0.1:{port}/status/200"))


def test_a_slow_webhook_times_out_at_the_ctx_deadline(server: ThreadingHTTPServer) -> None:
    started = time.monotonic()
    with pytest.raises(HandlerTimeoutError):
        run(call_webhook(f"{base_url(server)}/slow/600", timeout_s=0.2))
    assert time.monotonic() - started < 1.0


def test_an_expired_deadline_does_not_call_the_webhook(server: ThreadingHTTPServer) -> None:
    with pytest.raises(HandlerTimeoutError, match="deadline passed"):
        run(call_webhook(f"{base_url(server)}/status/200", timeout_s=-1))
    assert server.received == []  # type: ignore[attr-defined]


def test_webhook_outcomes_through_the_runner(server: ThreadingHTTPServer) -> None:
    async def scenario() -> list[tuple[RunStatus, bool]]:
        registry = HandlerRegistry(allowed_http_hosts=["127.0.0.1"])
        pool = SyncHandlerPool(1)
        try:
            outcomes: list[tuple[RunStatus, bool]] = []
            for path, timeout_s in (("status/200", 5.0), ("status/404", 5.0), ("slow/600", 0.2)):
                handler = registry.register_http(
                    f"hook.h{len(outcomes)}", f"{base_url(server)}/{path}"
                )
                outcome = await run_handler(handler, new_ctx(timeout_s=timeout_s), timeout_s, pool)
                outcomes.append((outcome.status, outcome.retryable))
            return outcomes
        finally:
            pool.close()
            await registry.aclose()

    assert run(scenario()) == [
        (RunStatus.SUCCEEDED, False),
        (RunStatus.FAILED, False),
        (RunStatus.TIMED_OUT, True),
    ]


@pytest.mark.parametrize(
    "url",
    [
        "http://evil.example/hook",
        "http://127.0.0.1@evil.example/hook",  # userinfo must not fool the host check
        "ftp://127.0.0.1/hook",
        "127.0.0.1/hook",
        "http:///hook",
        "http://127.0.0.2/hook",
    ],
)
def test_urls_outside_the_allow_list_are_refused(url: str) -> None:
    registry = HandlerRegistry(allowed_http_hosts=["127.0.0.1"])
    with pytest.raises(ConfigurationError):
        registry.register_http("hooks.x", url)
    assert "hooks.x" not in registry


def test_allowed_urls_match_hosts_case_insensitively() -> None:
    assert check_http_url("https://API.Example.com:8443/x?y=1", ["api.example.COM"])
    with pytest.raises(ConfigurationError, match="allow-list"):
        check_http_url("https://api.example.com.evil.net/x", ["api.example.com"])


def test_status_mapping_and_retry_after_parsing() -> None:
    raise_for_http_status(200, url="u")
    raise_for_http_status(299, url="u")
    with pytest.raises(NonRetryableError):
        raise_for_http_status(301, url="u")
    with pytest.raises(RetryableError):
        raise_for_http_status(599, url="u")
    assert parse_retry_after_s("120") == 120.0
    assert parse_retry_after_s(None) is None
    assert parse_retry_after_s("soon") is None
    now = 1_700_000_000.0
    assert parse_retry_after_s(formatdate(now + 30, usegmt=True), now_epoch_s=now) == 30.0
    assert parse_retry_after_s(formatdate(now - 30, usegmt=True), now_epoch_s=now) == 0.0


class FakeProducer:
    """Mimics confluent_kafka.Producer.produce's positional order (topic, value, key)."""

    def __init__(self, error: Exception | None = None) -> None:
        self.records: list[tuple[str, bytes | None, bytes | None]] = []
        self.error = error

    def produce(self, topic: str, value: bytes | None = None, key: bytes | None = None) -> None:
        if self.error is not None:
            raise self.error
        self.records.append((topic, key, value))


def test_kafka_kind_produces_payload_keyed_by_execution_id() -> None:
    producer = FakeProducer()
    registry = HandlerRegistry(allowed_kafka_topics=["team.events"])
    handler = registry.register_kafka("events.emit", "team.events", producer.produce)
    assert handler.kind is HandlerKind.KAFKA and handler.is_async

    async def scenario() -> RunStatus:
        pool = SyncHandlerPool(1)
        try:
            ctx = new_ctx(payload=b"hello")
            return (await run_handler(handler, ctx, 1.0, pool)).status
        finally:
            pool.close()

    assert run(scenario()) is RunStatus.SUCCEEDED
    assert producer.records == [("team.events", b"job-1@1700000000000", b"hello")]


def test_kafka_kind_refuses_topics_outside_the_allow_list() -> None:
    registry = HandlerRegistry(allowed_kafka_topics=["team.events"])
    with pytest.raises(ConfigurationError, match="allow-list"):
        registry.register_kafka("events.emit", "kafkron.jobs", FakeProducer().produce)


@pytest.mark.parametrize("error", [BufferError("queue full"), RuntimeError("broker gone")])
def test_kafka_produce_failures_are_retryable(error: Exception) -> None:
    registry = HandlerRegistry(allowed_kafka_topics=["t"])
    handler = registry.register_kafka("events.emit", "t", FakeProducer(error).produce)
    awaitable = handler.fn(new_ctx())
    assert awaitable is not None
    with pytest.raises(RetryableError):
        run(awaitable)  # type: ignore[arg-type]
