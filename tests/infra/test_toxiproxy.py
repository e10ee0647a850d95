"""Toxiproxy (infra/toxiproxy.py) in front of a local echo server: latency both ways, a cut
that closes connections and refuses new ones, and its heal. Skipped only where Go is absent
(the server is built from the Go module proxy at setup)."""

from __future__ import annotations

import shutil
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.toxiproxy import Proxy, Toxiproxy, build

pytestmark = pytest.mark.skipif(
    shutil.which("go") is None,
    reason="Go is not installed: Toxiproxy is built from source (apt-get install golang-go)",
)


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        while data := self.request.recv(4096):
            self.request.sendall(data)


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        with Toxiproxy(tmp_path / "toxiproxy.log", build()) as toxiproxy:
            yield toxiproxy.proxy("echo", f"{host!s}:{port}")
    finally:
        server.shutdown()
        server.server_close()


def round_trip_s(listen: str) -> float:
    host, _, port = listen.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        started = time.monotonic()
        sock.sendall(b"ping")
        assert sock.recv(16) == b"ping"
        return time.monotonic() - started


def test_latency_both_ways_adds_up_and_goes_away(proxy: Proxy) -> None:
    assert round_trip_s(proxy.listen) < 0.1
    toxics = [proxy.add_latency(150, stream="upstream"), proxy.add_latency(150)]
    assert 0.29 <= round_trip_s(proxy.listen) < 1.0
    for toxic in toxics:
        proxy.remove_toxic(toxic)
    assert round_trip_s(proxy.listen) < 0.1


def test_a_cut_closes_connections_and_refuses_new_ones_until_healed(proxy: Proxy) -> None:
    host, _, port = proxy.listen.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"a")
        assert sock.recv(1) == b"a"
        proxy.disable()
        try:
            sock.sendall(b"b")
            assert sock.recv(1) == b""  # closed by the proxy
        except ConnectionError:
            pass
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((host, int(port)), timeout=5).close()
    proxy.enable()
    assert round_trip_s(proxy.listen) < 0.1


def test_a_timeout_toxic_drops_data_and_closes_when_removed(proxy: Proxy) -> None:
    host, _, port = proxy.listen.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        toxic = proxy.add_timeout(0)
        sock.sendall(b"held")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(16)
        proxy.remove_toxic(toxic)
        sock.settimeout(5)
        assert sock.recv(16) == b""  # the data was dropped, the connection closed
    assert round_trip_s(proxy.listen) < 0.1
