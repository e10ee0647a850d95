"""Format, start, stop and inspect the local single-node KRaft Kafka broker.

State lives under ``BrokerSettings.home``: ``config/``, ``data/``, ``logs/`` and
``broker.json`` (pid and ports of the running broker).
"""

from __future__ import annotations

import base64
import json
import os
import shlex
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient

from infra.fetch import fetch_jars, require_tool
from infra.settings import BrokerSettings
from streams.exceptions import BrokerError

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class BrokerState:
    """What a started broker left behind for ``status`` and ``stop`` to find."""

    pid: int
    port: int
    controller_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child counts as dead
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


class LocalBroker:
    """One broker home folder: fetch, format once, start (idempotent), stop, status."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.home = settings.home.resolve()
        self.state_file = self.home / "broker.json"
        self.log_dir = self.home / "logs"
        # Our own child, kept so that stop() reaps it; None when another process started it.
        self._process: subprocess.Popen[bytes] | None = None

    def read_state(self) -> BrokerState | None:
        """The recorded state, or None when no broker was started from this home."""
        if not self.state_file.exists():
            return None
        return BrokerState(**json.loads(self.state_file.read_text()))

    def running_state(self) -> BrokerState | None:
        """The recorded state if that broker process is still alive."""
        state = self.read_state()
        return state if state is not None and _pid_alive(state.pid) else None

    def answers(self, bootstrap: str, timeout_s: float = 2.0) -> bool:
        """Whether a broker at ``bootstrap`` answers a metadata request."""
        host, _, port = bootstrap.rpartition(":")
        try:  # a plain connect first, so librdkafka does not log refused connections
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
        except OSError:
            return False
        admin = AdminClient(
            {"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0}
        )
        try:
            admin.list_topics(timeout=timeout_s)
        except Exception:
            return False
        return True

    def start(self) -> BrokerState:
        """Start the broker unless it already runs; return once it answers, or raise."""
        state = self.running_state()
        if state is not None:
            if self.answers(state.bootstrap, timeout_s=10):
                return state
            self._wait_ready(state, time.monotonic() + self.settings.start_timeout_s)
            return state
        libs = fetch_jars(self.settings)
        previous = self.read_state()
        port = self.settings.port or (previous.port if previous else 0) or free_port()
        cport = self.settings.controller_port or (previous.controller_port if previous else 0)
        cport = cport or free_port()
        config = self._write_config(port, cport)
        self._format_once(libs, config)
        state = BrokerState(pid=self._spawn(libs, config), port=port, controller_port=cport)
        self.state_file.write_text(json.dumps(asdict(state)))
        self._wait_ready(state, time.monotonic() + self.settings.start_timeout_s)
        return state

    def stop(self) -> bool:
        """SIGTERM the broker, SIGKILL it after the grace period; False if none ran."""
        state = self.running_state()
        if state is None:
            return False
        os.kill(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.stop_grace_s
        while time.monotonic() < deadline and _pid_alive(state.pid):
            time.sleep(0.2)
        if _pid_alive(state.pid):
            os.kill(state.pid, signal.SIGKILL)
            while _pid_alive(state.pid):
                time.sleep(0.05)
        if self._process is not None:
            self._process.wait()
            self._process = None
        return True

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the broker's logs, for error messages."""
        chunks = []
        for name in ("server.log", "broker.out"):
            path = self.log_dir / name
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                chunks.append(f"--- {path} ---\n" + "\n".join(text))
        return "\n".join(chunks) or "(no broker log yet)"

    def _write_config(self, port: int, controller_port: int) -> Path:
        config_dir = self.home / "config"
        config_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        props = (
            (_HERE / "server.properties")
            .read_text()
            .format(port=port, controller_port=controller_port, data_dir=self.home / "data")
        )
        (config_dir / "server.properties").write_text(props)
        log4j = (_HERE / "log4j2.properties").read_text().format(log_dir=self.log_dir)
        (config_dir / "log4j2.properties").write_text(log4j)
        return config_dir

    def _format_once(self, libs: Path, config: Path) -> None:
        if (self.home / "data" / "meta.properties").exists():
            return
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if cluster_id.startswith("-"):
            cluster_id = "A" + cluster_id[1:]
        java = require_tool("java", "apt-get install openjdk-17-jre-headless")
        cmd = [
            java, "-cp", f"{libs}/*", f"-Dlog4j2.configurationFile={config}/log4j2.properties",
            "kafka.tools.StorageTool", "format", "-t", cluster_id,
            "-c", str(config / "server.properties"),
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BrokerError(f"formatting the broker storage failed:\n{done.stdout}{done.stderr}")

    def _spawn(self, libs: Path, config: Path) -> int:
        java = require_tool("java", "apt-get install openjdk-17-jre-headless")
        heap = f"{self.settings.heap_mb}m"
        cmd = [
            java, f"-Xms{heap}", f"-Xmx{heap}", *shlex.split(self.settings.jvm_options),
            "-Djava.awt.headless=true", f"-Dkafka.logs.dir={self.log_dir}",
            f"-Dlog4j2.configurationFile={config}/log4j2.properties",
            "-cp", f"{libs}/*", "kafka.Kafka", str(config / "server.properties"),
        ]  # fmt: skip
        out = (self.log_dir / "broker.out").open("ab")
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        out.close()
        self._process = proc
        return proc.pid

    def _wait_ready(self, state: BrokerState, deadline: float) -> None:
        while time.monotonic() < deadline:
            if not _pid_alive(state.pid):
                if self._process is not None:
                    self._process.wait()
                    self._process = None
                raise BrokerError(f"the broker exited during start-up.\n{self.log_tail()}")
            if self.answers(state.bootstrap):
                return
            time.sleep(0.5)
        raise BrokerError(
            f"the broker did not answer on {state.bootstrap} within "
            f"{self.settings.start_timeout_s:.0f}s.\n{self.log_tail()}"
        )
