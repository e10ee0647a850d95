"""A cheap HTTP/1.1 load generator: raw asyncio protocols, keep-alive, optional pipelining.

httpx spends ~1.5 ms of CPU per request here, more than the server it measures, so a REST
benchmark driven by it measures the client. This one pre-encodes every request and parses
only the status line and ``content-length`` of each answer (~20-40 us per request), so on
2 shared cores the server is what limits.

``connections`` keep-alive connections each keep up to ``depth`` requests in flight
(``depth`` > 1 pipelines: the server answers them in order on the connection).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field


@dataclass
class LoadFigures:
    """What one load run saw: counts per status, rate and latency percentiles."""

    requests: int
    seconds: float
    statuses: dict[int, int]
    latencies_s: list[float] = field(repr=False)
    bodies: list[bytes] = field(repr=False, default_factory=list)

    @property
    def per_s(self) -> float:
        return self.requests / self.seconds

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return 1000 * ordered[min(len(ordered) - 1, max(0, int(len(ordered) * q) - 1))]

    @property
    def p50_ms(self) -> float:
        return 1000 * statistics.median(self.latencies_s)


def http_request(
    method: str, path: str, body: bytes = b"", headers: Sequence[tuple[str, str]] = ()
) -> bytes:
    """One HTTP/1.1 request's bytes (keep-alive, JSON body)."""
    lines = [f"{method} {path} HTTP/1.1", "host: bench", "content-type: application/json"]
    lines += [f"{k}: {v}" for k, v in headers]
    lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


class _Connection(asyncio.Protocol):
    """Sends requests from a shared iterator, up to ``depth`` unanswered at a time."""

    def __init__(self, source: Iterator[bytes], depth: int, run: _Run) -> None:
        self._source, self._depth, self._run = source, depth, run
        self._sent: deque[float] = deque()
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._send(self._depth)

    def _send(self, count: int) -> None:
        assert self._transport is not None
        chunks = []
        for request in self._source:
            chunks.append(request)
            self._sent.append(time.perf_counter())
            if len(chunks) == count:
                break
        if chunks:
            self._transport.write(b"".join(chunks))
        elif not self._sent:
            self._transport.close()

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        answered = 0
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = bytes(buffer[:end]).lower()
            at = head.find(b"\r\ncontent-length:")
            if at < 0:
                raise RuntimeError(f"an answer without content-length: {head[:200]!r}")
            stop = head.find(b"\r\n", at + 2)
            length = int(head[at + 17 : stop if stop >= 0 else len(head)])
            if len(buffer) < end + 4 + length:
                break
            self._run.record(
                int(head[9:12]), self._sent.popleft(), buffer[end + 4 : end + 4 + length]
            )
            del buffer[: end + 4 + length]
            answered += 1
        if answered:
            self._send(answered)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)


class _Run:
    def __init__(self, keep_bodies: bool) -> None:
        self.statuses: dict[int, int] = {}
        self.latencies: list[float] = []
        self.bodies: list[bytes] = []
        self._keep_bodies = keep_bodies

    def record(self, status: int, sent: float, body: bytearray) -> None:
        self.latencies.append(time.perf_counter() - sent)
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if self._keep_bodies:
            self.bodies.append(bytes(body))


async def run_load(
    host: str,
    port: int,
    requests: Sequence[bytes],
    *,
    connections: int = 32,
    depth: int = 1,
    keep_bodies: bool = False,
) -> LoadFigures:
    """Send every request over ``connections`` connections; wait for every answer."""
    loop = asyncio.get_running_loop()
    source = iter(requests)
    run = _Run(keep_bodies)
    started = time.perf_counter()
    protocols = []
    for _ in range(connections):
        _, protocol = await loop.create_connection(
            lambda: _Connection(source, depth, run), host, port
        )
        protocols.append(protocol)
    errors = [e for e in await asyncio.gather(*(p.closed for p in protocols)) if e is not None]
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"{len(errors)} connections failed, first: {errors[0]!r}")
    answered = sum(run.statuses.values())
    if answered != len(requests):
        raise RuntimeError(f"{answered} answers to {len(requests)} requests")
    return LoadFigures(len(requests), elapsed, run.statuses, run.latencies, run.bodies)
