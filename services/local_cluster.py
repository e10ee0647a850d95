"""``kafkron up``: the broker, the topics and every service on this machine, until Ctrl-C.

Once every service serves, it writes the local profile (``services/operator_cli/profile.py``:
the API's URL, the bootstrap servers and the namespace) by which every other ``kafkron``
command finds this cluster with no environment set, and removes it when it stops.
"""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from infra.cluster import ClusterState, LocalCluster, replication_of
from infra.settings import BrokerSettings
from services.operator_cli.profile import (
    Profile,
    live_owner,
    remove_own_profile,
    write_profile,
)
from services.readiness import Readiness, wait_until_ready
from streams.admin import durability_configs, ensure_topics
from streams.exceptions import KafkronError
from streams.settings import KafkaSettings

READY_TIMEOUT_S = 120.0
"""How long ``up`` waits for every service to serve before it says which do not."""

STOP_GRACE_S = 20.0
"""How long a service may take to stop after SIGTERM before it is killed."""


@dataclass
class ServiceProcess:
    """One service run as a child process of ``kafkron up``."""

    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(self.argv, env=env)

    @property
    def pid(self) -> int:
        if self.process is None:
            raise KafkronError(f"{self.name} was not started: it has no pid yet")
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def terminate(self) -> None:
        """Ask it to stop (SIGTERM): it commits what it ran and leaves its groups."""
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGTERM)

    def wait_or_kill(self, deadline: float) -> str:
        """Wait for it to exit until ``deadline`` (monotonic), SIGKILL it after; says how it
        ended, for ``up``'s log."""
        if self.process is None:
            return "not started"
        try:
            self.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            return "killed: still running after its grace period"
        return f"exited {self.process.returncode}"

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        self.terminate()
        self.wait_or_kill(time.monotonic() + grace_s)


def stop_services(services: list[ServiceProcess], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM every service at once, then wait for all under one deadline (SIGKILL those
    still running after ``grace_s``): stopping takes the slowest one's time, not the sum."""
    started = time.monotonic()
    for service in services:
        service.terminate()
    deadline = started + grace_s
    for service in services:
        how = service.wait_or_kill(deadline)
        print(f"[kafkron] {service.name} {how} after {time.monotonic() - started:.1f} s")


def local_services() -> list[ServiceProcess]:
    """The services ``kafkron up`` runs, each as ``python -m services.cli <name>``."""
    from services import commands

    return [
        ServiceProcess(name, [sys.executable, "-m", "services.cli", *argv])
        for name, argv in commands.LOCAL_SERVICES
    ]


def run_local_cluster(
    broker_settings: BrokerSettings,
    kafka: KafkaSettings,
    *,
    demo: bool = False,
    check: bool = False,
    profile: Path | None = None,
) -> int:
    """Start broker, topics and services; print a readiness report; write the ``profile``
    (when given) once all serve; run until stopped."""
    import os

    broker = LocalCluster(broker_settings)
    state = broker.start()
    kafka = on_local_kafka(kafka, state)
    if len(state.nodes) == 1:
        print(f"[kafkron] broker ready on {state.bootstrap}")
    else:
        print(
            f"[kafkron] {len(state.nodes)} brokers ready on {state.bootstrap} (topics: "
            f"{kafka.replication_factor} replicas, min.insync.replicas "
            f"{durability_configs(kafka).get('min.insync.replicas', 1)})"
        )
    for report in ensure_topics(kafka):
        print(f"[kafkron] topic {report.name}: {report.partitions} partitions")
    env = dict(
        os.environ,
        KAFKRON_BOOTSTRAP_SERVERS=state.bootstrap,
        KAFKRON_REPLICATION_FACTOR=str(kafka.replication_factor),
    )
    services = local_services()
    stop = threading.Event()

    def _on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        for service in services:
            service.start(env)
            print(f"[kafkron] started {service.name}")
        # Not serving: stopped (the loop below ends), a service exited (the loop says which),
        # or still waiting after the timeout (said here). The demo runs only when all serve.
        waiting = _wait_for_services(services, kafka, stop)
        if not waiting:
            print("[kafkron] ready:", ", ".join(["broker", "topics", *[s.name for s in services]]))
            if profile is not None:
                _write_profile(profile, kafka, env.get("KAFKRON_TOKEN") or None)
            if demo:
                from services import commands

                commands.run_demo(kafka)
        elif not stop.is_set() and all(s.alive() for s in services):
            print(f"[kafkron] not serving after {READY_TIMEOUT_S:.0f} s: {waiting}")
            if check:
                return 1
        while not stop.is_set():  # Ctrl-C reaches the services too: they exit, not die
            dead = [s.name for s in services if not s.alive()]
            if dead:
                print(f"[kafkron] service(s) exited: {', '.join(dead)}; shutting down")
                return 1
            if check:
                break
            time.sleep(0.5)
        return 0
    finally:
        if profile is not None:
            remove_own_profile(profile)
        stop_services(services)
        # Kafka clients kept alive by reference cycles (readiness probes, admin clients) go
        # now, while their broker still answers: librdkafka's destroy of a client whose
        # broker is gone can wait forever (a broker thread that never ends), and at exit
        # that hung 'up' after it had stopped everything.
        gc.collect()
        broker.stop()
        print("[kafkron] stopped")


def on_local_kafka(kafka: KafkaSettings, state: ClusterState) -> KafkaSettings:
    """``kafka`` pointed at the local Kafka: its bootstrap servers and, on a cluster, a
    replication factor of 3 (at most its size) unless KAFKRON_REPLICATION_FACTOR says."""
    update: dict[str, object] = {"bootstrap_servers": state.bootstrap}
    if "replication_factor" not in kafka.model_fields_set:
        update["replication_factor"] = replication_of(len(state.nodes))[0]
    return kafka.model_copy(update=update)


def _write_profile(path: Path, kafka: KafkaSettings, token: str | None) -> None:
    """Write the profile (with ``KAFKRON_TOKEN``, when set, for the API's tokens), unless
    another running ``kafkron up`` owns it (never clobbered)."""
    owner = live_owner(path)
    if owner is not None:
        print(
            f"[kafkron] profile {path} belongs to another running 'kafkron up' (pid {owner}); "
            "left as it is: give this cluster its own with --profile or KAFKRON_PROFILE"
        )
        return
    write_profile(path, _profile_of(kafka, token))
    print(f"[kafkron] profile {path}: other kafkron commands find this cluster by it")


def _profile_of(kafka: KafkaSettings, token: str | None = None) -> Profile:
    """Where this cluster's API and Kafka are (the API's address as its probe reaches it)."""
    from services import commands

    return Profile(
        api_url=commands.local_api_url(kafka),
        bootstrap_servers=kafka.bootstrap_servers,
        namespace=kafka.namespace,
        token=token,
    )


def _wait_for_services(
    services: list[ServiceProcess], kafka: KafkaSettings, stop: threading.Event
) -> str:
    """Wait until every service serves (``services/readiness.py``), printing each as it does;
    returns those that do not yet, with what their probes saw ("" when all serve)."""
    from services import commands

    probes = {s.name: commands.READINESS[s.name](kafka, s.pid) for s in services}
    announced: set[str] = set()

    def interrupted() -> bool:
        return stop.is_set() or not all(s.alive() for s in services)

    def report(answers: dict[str, Readiness]) -> None:
        for name, answer in answers.items():
            if answer.ready and name not in announced:
                announced.add(name)
                print(f"[kafkron] {name} serving ({answer.detail})")

    answers = wait_until_ready(probes, READY_TIMEOUT_S, interrupted, on_answers=report)
    return "; ".join(f"{n} ({a.detail})" for n, a in answers.items() if not a.ready)
