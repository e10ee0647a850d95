"""Toxiproxy, a TCP proxy that adds network faults on demand, for the network fault tests.

Built from source with the machine's Go (``go install`` of a pinned version from the Go
module proxy) into ``.state/toxiproxy/<version>/``, never committed; ``./dev`` setup builds
it (``python -m infra.toxiproxy build``). A :class:`Toxiproxy` runs the server on
127.0.0.1 only, on a free port, and drives it through its HTTP API: a :class:`Proxy` in
front of an address, with ``latency``, ``timeout`` and ``reset_peer`` toxics, and a cut
(the proxy disabled: its connections closed, new ones refused) that heals when enabled.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Literal

from infra.broker import free_port
from streams.exceptions import KafkronError

VERSION = "v2.12.0"
PACKAGE = "github.com/Shopify/toxiproxy/v2/cmd/server"
ROOT = Path(__file__).resolve().parent.parent
Stream = Literal["upstream", "downstream"]


class ToxiproxyError(KafkronError):
    """Toxiproxy could not be built, started or driven; the message says what to do."""


def binary_path(state_dir: Path = ROOT / ".state") -> Path:
    """Where the pinned version's server binary is built (``go install`` names it ``server``)."""
    return state_dir / "toxiproxy" / VERSION / "server"


def build(state_dir: Path = ROOT / ".state", timeout_s: float = 600.0) -> Path:
    """The server binary, built once with ``go install`` from the Go module proxy."""
    binary = binary_path(state_dir)
    if binary.is_file():
        return binary
    go = shutil.which("go")
    if go is None:
        raise ToxiproxyError(
            "'go' is not on PATH, so Toxiproxy cannot be built: install Go 1.22 or newer "
            "(https://go.dev/dl/ or apt-get install golang-go) and run ./dev setup again"
        )
    env = {**os.environ, "GOBIN": str(binary.parent), "GOFLAGS": "-mod=mod"}
    done = subprocess.run(
        [go, "install", f"{PACKAGE}@{VERSION}"],
        env=env, capture_output=True, text=True, timeout=timeout_s, check=False,
    )  # fmt: skip
    if done.returncode != 0 or not binary.is_file():
        raise ToxiproxyError(
            f"go install {PACKAGE}@{VERSION} failed (exit {done.returncode}):\n"
            f"{done.stderr[-2000:]}\nCheck that the Go module proxy (GOPROXY, default "
            "https://proxy.golang.org) is reachable, then run ./dev setup again"
        )
    return binary


class Proxy:
    """One proxy of a running Toxiproxy: ``listen`` forwards to ``upstream``."""

    def __init__(self, server: Toxiproxy, name: str, listen: str, upstream: str) -> None:
        self.server = server
        self.name = name
        self.listen = listen
        self.upstream = upstream

    def add_latency(
        self, latency_ms: int, jitter_ms: int = 0, stream: Stream = "downstream"
    ) -> str:
        """Delay data in ``stream`` by ``latency_ms`` +- ``jitter_ms``; the toxic's name."""
        return self._add("latency", stream, latency=latency_ms, jitter=jitter_ms)

    def add_timeout(self, timeout_ms: int, stream: Stream = "downstream") -> str:
        """A black hole: drop the data; close the connection after ``timeout_ms`` (0: only when
        the toxic is removed, and the dropped data is lost)."""
        return self._add("timeout", stream, timeout=timeout_ms)

    def add_reset_peer(self, timeout_ms: int = 0, stream: Stream = "downstream") -> str:
        """Reset connections (TCP RST) after ``timeout_ms``."""
        return self._add("reset_peer", stream, timeout=timeout_ms)

    def remove_toxic(self, toxic: str) -> None:
        self.server.request("DELETE", f"/proxies/{self.name}/toxics/{toxic}")

    def disable(self) -> None:
        """Cut: close every connection through the proxy and refuse new ones."""
        self.server.request("PATCH", f"/proxies/{self.name}", {"enabled": False})

    def enable(self) -> None:
        """Heal a cut: accept connections again."""
        self.server.request("PATCH", f"/proxies/{self.name}", {"enabled": True})

    def _add(self, kind: str, stream: Stream, **attributes: int) -> str:
        name = f"{kind}_{stream}"
        body = {"name": name, "type": kind, "stream": stream, "attributes": attributes}
        self.server.request("POST", f"/proxies/{self.name}/toxics", body)
        return name


class Toxiproxy:
    """The Toxiproxy server as a child process on 127.0.0.1; a context manager."""

    def __init__(self, log_path: Path, binary: Path | None = None) -> None:
        self.binary = binary or binary_path()
        self.log_path = log_path
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Toxiproxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 10.0) -> Toxiproxy:
        if not self.binary.is_file():
            raise ToxiproxyError(
                f"no Toxiproxy at {self.binary}: build it with 'python -m infra.toxiproxy build'"
                " (./dev setup does)"
            )
        self.port = free_port()
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [str(self.binary), "-host", "127.0.0.1", "-port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise ToxiproxyError(f"toxiproxy exited at start; see {self.log_path}")
            try:
                self.request("GET", "/version")
                return self
            except ToxiproxyError:
                time.sleep(0.05)
        self.stop()
        raise ToxiproxyError(
            f"toxiproxy did not answer within {timeout_s:.0f} s; see {self.log_path}"
        )

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def proxy(self, name: str, upstream: str, listen_port: int = 0) -> Proxy:
        """A new proxy on 127.0.0.1 (``listen_port``, 0: a free one) in front of ``upstream``."""
        listen = f"127.0.0.1:{listen_port or free_port()}"
        body = {"name": name, "listen": listen, "upstream": upstream, "enabled": True}
        self.request("POST", "/proxies", body)
        return Proxy(self, name, listen, upstream)

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One call of the HTTP API; its decoded JSON answer (None when empty)."""
        data = json.dumps(body).encode() if body is not None else None
        url = f"http://127.0.0.1:{self.port}{path}"
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise ToxiproxyError(f"toxiproxy {method} {path}: {exc.code} {detail}") from exc
        except OSError as exc:
            raise ToxiproxyError(f"toxiproxy {method} {path}: {exc}") from exc
        return json.loads(text) if text.strip() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.toxiproxy")
    parser.add_argument("action", choices=["build", "path"])
    args = parser.parse_args(argv)
    if args.action == "path":
        print(binary_path())
        return 0
    try:
        print(build())
    except (ToxiproxyError, subprocess.TimeoutExpired) as exc:
        print(f"toxiproxy not built: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
