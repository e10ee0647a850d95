"""Format, start, stop and inspect one local KRaft Kafka node (broker and controller in one JVM).

State lives under ``BrokerSettings.home``: ``config/``, ``data/``, ``logs/`` and
``broker.json`` (pid and ports of the running broker) and ``kafka-version`` (the Kafka that
formatted or last ran it; another Kafka refuses to start it: ``infra/home_version.py``).
Alone, a node is its own controller quorum (the default local broker); given a
:class:`Membership` it is one node of a multi-node cluster (``infra/cluster.py``).
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

from infra import home_version
from infra.fetch import fetch_jars, require_tool
from infra.sasl import scram_format_args
from infra.settings import BrokerSettings
from streams.exceptions import BrokerError

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class BrokerState:
    """What a started broker left behind for ``status`` and ``stop`` to find."""

    pid: int
    port: int
    controller_port: int
    node_id: int = 1

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass(frozen=True)
class Membership:
    """What makes a node one of several: the shared cluster id, the controller quorum
    (``1@127.0.0.1:port,2@...``), the replication of Kafka's internal topics, and how soon a
    silent node is fenced (its partitions then move to the other replicas)."""

    cluster_id: str
    voters: str
    replication_factor: int
    min_insync_replicas: int
    broker_heartbeat_interval_ms: int = 1000
    broker_session_timeout_ms: int = 4000

    def properties(self) -> dict[str, object]:
        """The placeholders of ``server.properties`` a member fills."""
        fields = asdict(self)
        del fields["cluster_id"]
        return fields


def _alone(controller_port: int) -> dict[str, object]:
    """The placeholders of a single node: its own quorum, Kafka's defaults otherwise."""
    return {
        "voters": f"1@127.0.0.1:{controller_port}",
        "replication_factor": 1,
        "min_insync_replicas": 1,
        "broker_heartbeat_interval_ms": 2000,
        "broker_session_timeout_ms": 9000,
    }


def new_cluster_id() -> str:
    """A random KRaft cluster id: URL-safe base64 of 16 bytes, not starting with '-'."""
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return "A" + cluster_id[1:] if cluster_id.startswith("-") else cluster_id


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
    """One broker home folder: fetch, format once, start (idempotent), stop, status.

    ``node_id`` and ``membership`` make it one node of a cluster; without them it is the
    single node 1, its own quorum."""

    def __init__(
        self, settings: BrokerSettings, node_id: int = 1, membership: Membership | None = None
    ) -> None:
        self.settings = settings
        self.node_id = node_id
        self.membership = membership
        self.home = settings.home.resolve()
        self.state_file = self.home / "broker.json"
        self.log_dir = self.home / "logs"
        # Our own child, kept so that stop() reaps it; None when another process started it.
        self._process: subprocess.Popen[bytes] | None = None
        # Set when this object started the JVM: its Kafka version is recorded in the home
        # once the broker answers (never for a broker another process started).
        self._record_when_ready: str | None = None

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
        state = self.launch()
        self.wait_ready(state)
        return state

    def check_version(self, whole_home: Path | None = None) -> None:
        """Raise if this home is recorded for another Kafka than the settings' and its
        broker is not running (a running one is reused whatever it runs); ``whole_home`` is
        the folder the error says to delete when not this one (a cluster's)."""
        if self.running_state() is None:
            home_version.check(self.home, self.settings.kafka_version, whole_home)

    def launch(self) -> BrokerState:
        """Start the JVM unless it already runs, without waiting for it to answer (a cluster's
        nodes answer only once a quorum of them runs: launch all, then wait for each)."""
        state = self.running_state()
        if state is not None:
            return state
        version = self.settings.kafka_version
        self.check_version()
        libs = fetch_jars(self.settings)
        previous = self.read_state()
        port = self.settings.port or (previous.port if previous else 0) or free_port()
        cport = self.settings.controller_port or (previous.controller_port if previous else 0)
        cport = cport or free_port()
        config = self._write_config(port, cport)
        if self._format_once(libs, config):
            home_version.record_version(self.home, version)
        pid = self._spawn(libs, config)
        self._record_when_ready = version
        state = BrokerState(pid=pid, port=port, controller_port=cport, node_id=self.node_id)
        self.state_file.write_text(json.dumps(asdict(state)))
        return state

    def wait_ready(self, state: BrokerState) -> None:
        """Until the broker answers a metadata request; raise with its log if it exits or
        stays silent past ``start_timeout_s``."""
        self._wait_ready(state, time.monotonic() + self.settings.start_timeout_s)
        if self._record_when_ready is not None:  # a home without a record started fine
            home_version.record_version(self.home, self._record_when_ready)
            self._record_when_ready = None

    def kill(self) -> bool:
        """SIGKILL the broker (a crash: no controlled shutdown); False if none ran."""
        state = self.running_state()
        if state is None:
            return False
        os.kill(state.pid, signal.SIGKILL)
        while _pid_alive(state.pid):
            time.sleep(0.02)
        if self._process is not None:
            self._process.wait()
            self._process = None
        return True

    def stop(self) -> bool:
        """SIGTERM the broker, SIGKILL it after the grace period; False if none ran."""
        state = self.running_state()
        if state is None:
            return False
        os.kill(state.pid, signal.SIGTERM)
        return self.finish_stop(state, time.monotonic() + self.settings.stop_grace_s)

    def finish_stop(self, state: BrokerState, deadline: float) -> bool:
        """After SIGTERM: wait for the exit until ``deadline`` (monotonic), then SIGKILL."""
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
        member = self.membership
        props = (
            (_HERE / "server.properties")
            .read_text()
            .format(
                node_id=self.node_id,
                port=port,
                controller_port=controller_port,
                data_dir=self.home / "data",
                **(member.properties() if member else _alone(controller_port)),
            )
        )
        extra = "".join(f"{key}={value}\n" for key, value in self.settings.extra_properties.items())
        (config_dir / "server.properties").write_text(props + extra)
        log4j = (_HERE / "log4j2.properties").read_text().format(log_dir=self.log_dir)
        (config_dir / "log4j2.properties").write_text(log4j)
        return config_dir

    def _format_once(self, libs: Path, config: Path) -> bool:
        """Format the storage unless it was; whether it was formatted now."""
        if (self.home / "data" / "meta.properties").exists():
            return False
        cluster_id = self.membership.cluster_id if self.membership else new_cluster_id()
        java = require_tool("java", "apt-get install openjdk-17-jre-headless")
        cmd = [
            java, "-cp", f"{libs}/*", f"-Dlog4j2.configurationFile={config}/log4j2.properties",
            "kafka.tools.StorageTool", "format", "-t", cluster_id,
            "-c", str(config / "server.properties"),
            *scram_format_args(self.settings.scram_users),
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise BrokerError(f"formatting the broker storage failed:\n{done.stdout}{done.stderr}")
        return True

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
