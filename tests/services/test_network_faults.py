"""A slow or cut network between a service and the broker (issue 20), on the real broker.

The broker of this module has a second listener, PROXIED, whose advertised address is a
Toxiproxy's (infra/toxiproxy.py) in front of it: a client bootstrapped at the proxy is told
to reach the broker at the proxy again, so all its traffic crosses it, while clients of the
PLAINTEXT listener (and the broker's controller traffic) go direct. Services run as child
processes (bench/fleet.py), recurring jobs and one-offs fire, and the fire ledger
from ``job-results`` shows each fire's one final outcome; the ``tests.effect`` handler's log
shows each run, by which executor and when.

- latency: 200-500 ms each way for 20 s under the timer and the executor;
- a cut longer than the group's session timeout under one of two executors: its partitions
  move to the other, come back after the heal, and only runs the cut one started but could
  not commit run again;
- the same cut under one of two timers, and under one of two dag processors, each holding
  partitions with fires or DAG runs in flight: every DueEvent, and every release on
  ``dag-releases``, is committed once (``read_committed``), every execution has one final
  outcome, and the cut process holds partitions again by itself after the heal.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from bench.dag_runs import SIX_NODES, cron_every, dag_jobs
from bench.fault_ledger import read_ledger
from bench.fleet import (
    Fleet,
    Ledger,
    TopicReader,
    cron_every_second,
    one_off,
    ticks,
    whole_second_ms,
)
from bench.herd import produce_jobs
from infra.broker import LocalBroker, free_port
from infra.settings import BrokerSettings
from infra.toxiproxy import Proxy, Toxiproxy, build
from services.ingest.client import KafkronClient
from services.ingest.producer import partition_for_key
from services.ingest.settings import IngestSettings
from streams.admin import ensure_topics
from streams.codec import RecordKind
from streams.identity import execution_id
from streams.settings import KafkaSettings
from streams.topics import DAG_RELEASES
from tests.conftest import ROOT

from .executor.test_service_kit import now_ms

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("go") is None,
        reason="Go is not installed: Toxiproxy is built from source (apt-get install golang-go)",
    ),
]

PARTITIONS = 2
SESSION_TIMEOUT_S = 6.0  # the executor's and timer's group session (their default)


@dataclass(frozen=True)
class ProxiedBroker:
    direct: str  # the PLAINTEXT listener
    proxy: Proxy  # in front of the PROXIED listener, which advertises the proxy's address


@pytest.fixture(scope="module")
def proxied_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxiedBroker]:
    """A broker of this module's own whose PROXIED listener is reached through Toxiproxy."""
    home = tmp_path_factory.mktemp("proxied-broker")
    port, controller_port, proxied_port = free_port(), free_port(), free_port()
    with Toxiproxy(home / "toxiproxy.log", build()) as toxiproxy:
        proxy = toxiproxy.proxy("broker", f"127.0.0.1:{proxied_port}")
        listeners = {
            "PLAINTEXT": f"127.0.0.1:{port}",
            "CONTROLLER": f"127.0.0.1:{controller_port}",
            "PROXIED": f"127.0.0.1:{proxied_port}",
        }
        extra = {
            "listeners": ",".join(f"{name}://{addr}" for name, addr in listeners.items()),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},PROXIED://{proxy.listen}",
            "listener.security.protocol.map": ",".join(f"{n}:PLAINTEXT" for n in listeners),
        }
        settings = BrokerSettings(
            home=home / "broker", libs_dir=ROOT / ".state" / "kafka-libs", port=port,
            controller_port=controller_port, heap_mb=512, extra_properties=extra,
        )  # fmt: skip
        broker = LocalBroker(settings)
        try:
            broker.start()
            yield ProxiedBroker(direct=f"127.0.0.1:{port}", proxy=proxy)
        finally:
            broker.stop()


@pytest.fixture
def kafka(proxied_broker: ProxiedBroker, namespace: str, tmp_path: Path) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap_servers=proxied_broker.direct, namespace=namespace,
        partitions=PARTITIONS, state_dir=tmp_path / "state",
    )  # fmt: skip
    ensure_topics(settings)
    return settings


@pytest.fixture
def proxy(proxied_broker: ProxiedBroker) -> Iterator[Proxy]:
    yield proxied_broker.proxy
    proxied_broker.proxy.server.request("POST", "/reset")  # enabled, no toxics


@pytest.fixture
def ledger(kafka: KafkaSettings) -> Iterator[Ledger]:
    results = Ledger(kafka)
    yield results
    results.close()


@dataclass(frozen=True)
class Run:
    execution_id: str
    worker: str
    at_ms: int


def starts(effects_path: Path) -> list[Run]:
    """Every handler run's start, in the order logged."""
    runs = []
    for line in effects_path.read_text().splitlines():
        phase, execution, _attempt, worker, at_ms = line.split()
        if phase == "start":
            runs.append(Run(execution, worker, int(at_ms)))
    return runs


def submit(
    kafka: KafkaSettings, view_dir: Path, first_ms: int, span_ms: int, slow_at_ms: int = 0
) -> dict[str, int]:
    """Recurring jobs every second over [first_ms, first_ms + span_ms) and one-offs in it
    (with ``slow_at_ms``, also one-offs then whose handler takes 2 s on its first run: runs
    in flight at a cut); returns each expected execution's scheduled time."""
    end_ms = first_ms + span_ms
    requests: list[dict[str, Any]] = []
    expected: dict[str, int] = {}
    for i in range(6):
        requests.append(cron_every_second(f"every-second-{i}", first_ms, end_ms))
        for tick in ticks(first_ms, end_ms, 1_000):
            expected[execution_id(f"every-second-{i}", tick)] = tick
    for i in range(12):
        run_at_ms = first_ms + 300 + i * (span_ms // 12)
        requests.append(one_off(f"one-off-{i}", run_at_ms))
        expected[execution_id(f"one-off-{i}", run_at_ms)] = run_at_ms
    for i in range(6 if slow_at_ms else 0):
        requests.append({**one_off(f"slow-{i}", slow_at_ms), "payload": 2})
        expected[execution_id(f"slow-{i}", slow_at_ms)] = slow_at_ms
    with KafkronClient(IngestSettings(kafka=kafka, view_dir=view_dir)) as client:
        client.submit_many(requests)
    return expected


def sleep_until(at_ms: int) -> None:
    time.sleep(max(0.0, (at_ms - now_ms()) / 1000))


def assert_one_final_each(ledger: Ledger, fleet: Fleet, expected: dict[str, int]) -> None:
    finals = ledger.wait_for(set(expected), timeout_s=45)
    missing = set(expected) - set(finals)
    doubled = {e: n for e, n in finals.items() if n > 1}
    assert not missing and not doubled and set(finals) == set(expected), (
        f"missing {sorted(missing)[:5]} ({len(missing)}), doubled {doubled}\n{fleet.logs()}"
    )
    outcomes = ledger.final_statuses()
    assert all(outcomes[e] == ["SUCCEEDED"] for e in expected), outcomes


def lateness_ms(runs: list[Run], expected: dict[str, int]) -> dict[str, int]:
    """Each execution's first start minus its scheduled time."""
    first: dict[str, int] = {}
    for run in runs:
        first.setdefault(run.execution_id, run.at_ms - expected[run.execution_id])
    return first


def test_latency_both_ways_fires_each_once(
    kafka: KafkaSettings, proxy: Proxy, ledger: Ledger, tmp_path: Path
) -> None:
    fleet = Fleet(kafka, tmp_path, name="proxied")
    try:
        fleet.start("timer", "executor", KAFKRON_BOOTSTRAP_SERVERS=proxy.listen)
        first_ms = whole_second_ms(now_ms() + 2_000)
        expected = submit(kafka, tmp_path / "view", first_ms, span_ms=26_000)
        slow_from_ms, slow_until_ms = first_ms + 3_000, first_ms + 23_000
        sleep_until(slow_from_ms)
        toxics = [proxy.add_latency(350, 150, stream) for stream in ("upstream", "downstream")]
        sleep_until(slow_until_ms)
        for toxic in toxics:
            proxy.remove_toxic(toxic)
        assert_one_final_each(ledger, fleet, expected)
    finally:
        fleet.stop()
    runs = starts(fleet.effects_path)
    assert len(runs) == len(expected) == len({r.execution_id for r in runs}), "a run twice"
    late = lateness_ms(runs, expected)
    slow = [late[e] for e, t in expected.items() if slow_from_ms <= t < slow_until_ms]
    calm = [late[e] for e, t in expected.items() if not slow_from_ms - 2_000 <= t < slow_until_ms]
    print(
        f"latency 200-500 ms each way: {len(expected)} fires, each once; first start after "
        f"the fire time: median {sorted(slow)[len(slow) // 2]} ms, max {max(slow)} ms "
        f"(without: median {sorted(calm)[len(calm) // 2]} ms, max {max(calm)} ms)"
    )
    assert max(slow) > max(calm), "the latency toxics did not slow anything down"


def test_a_cut_longer_than_the_session_moves_partitions_and_back(
    kafka: KafkaSettings, proxy: Proxy, ledger: Ledger, tmp_path: Path
) -> None:
    direct = Fleet(kafka, tmp_path, name="direct")  # the timer and executor B
    cut = Fleet(kafka, tmp_path, name="cut")  # executor A, through the proxy
    cut_worker, direct_worker = cut.member("executor"), direct.member("executor")
    try:
        cut.start("executor", KAFKRON_BOOTSTRAP_SERVERS=proxy.listen)
        direct.start("timer", "executor")
        first_ms = whole_second_ms(now_ms() + 2_000)
        cut_at_ms, heal_at_ms = first_ms + 4_000, first_ms + 4_000 + 15_000
        expected = submit(kafka, tmp_path / "view", first_ms, 36_000, slow_at_ms=cut_at_ms - 700)
        sleep_until(cut_at_ms)
        proxy.disable()
        sleep_until(heal_at_ms)
        proxy.enable()
        assert_one_final_each(ledger, direct, expected)
    finally:
        cut.stop(timeout_s=10)  # a stuck executor is SIGKILLed after 10 s
        direct.stop()
    assert cut.effects_path == direct.effects_path
    runs = starts(direct.effects_path)
    by_execution: dict[str, list[Run]] = {}
    for run in runs:
        by_execution.setdefault(run.execution_id, []).append(run)
    assert set(by_execution) == set(expected)

    # Partitions: A's moved to B during the cut, and came back after the heal.
    def partition(execution: str) -> int:
        return partition_for_key(execution.rpartition("@")[0].encode(), PARTITIONS)

    before = {
        partition(r.execution_id) for r in runs if r.at_ms < cut_at_ms and r.worker == cut_worker
    }
    assert before, f"executor A ran nothing before the cut\n{direct.logs()}"
    on_b = [r for r in runs if r.worker == direct_worker and partition(r.execution_id) in before]
    moved_ms = min((r.at_ms for r in on_b if r.at_ms > cut_at_ms), default=None)
    assert moved_ms is not None and moved_ms < heal_at_ms, "A's partitions never moved to B"
    back_ms = min(
        (r.at_ms for r in runs if r.worker == cut_worker and r.at_ms > heal_at_ms), default=None
    )

    # Double effects: a run again only of what A started before the cut and could not commit,
    # then by B; never twice by one executor.
    reruns = {e: rs for e, rs in by_execution.items() if len(rs) > 1}
    for execution, again in reruns.items():
        workers = [r.worker for r in again]
        assert len(set(workers)) == len(workers), (execution, again)
        assert again[0].worker == cut_worker and again[0].at_ms < cut_at_ms + 1_000, again
    late = lateness_ms(runs, expected)
    back = f"{(back_ms - heal_at_ms) / 1000:.1f} s" if back_ms is not None else "never"
    print(
        f"cut of {(heal_at_ms - cut_at_ms) / 1000:.0f} s (session {SESSION_TIMEOUT_S:.0f} s): "
        f"{len(expected)} fires, each one final outcome; A's partitions ran on B "
        f"{(moved_ms - cut_at_ms) / 1000:.1f} s after the cut, on A again {back} after the "
        f"heal; longest first start after the fire time {max(late.values()) / 1000:.1f} s; "
        f"reruns {len(reruns)}"
    )
    # Found by this test: with a transaction open at the cut, A's event loop sat in
    # send_offsets_to_transaction for good (librdkafka #5456, #5511) and A never ran again.
    assert back_ms is not None, f"executor A ran nothing after the heal\n{cut.log('executor')}"


# --- The timer and the dag processor cut off (a second instance of each takes over) ---


def assigned_partitions(kafka: KafkaSettings, service: str, member: str) -> int:
    """How many topic partitions group ``<namespace><service>`` assigns to ``member`` now
    (0 when it is not a member)."""
    group = f"{kafka.namespace}{service}"
    admin = AdminClient(kafka.client_config())
    description = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    return sum(
        len(m.assignment.topic_partitions) for m in description.members if m.client_id == member
    )


def cut_until_moved(proxy: Proxy, kafka: KafkaSettings, service: str, cut: Fleet, direct: Fleet,
                    heal_at_ms: int) -> None:  # fmt: skip
    """Cut the proxy with ``cut``'s ``service`` holding partitions, check that they all move
    to ``direct``'s before ``heal_at_ms``, and heal at ``heal_at_ms``."""
    held = assigned_partitions(kafka, service, cut.member(service))
    assert held, f"the {service} to cut holds no partitions\n{cut.logs()}"
    proxy.disable()
    moved = False
    while now_ms() < heal_at_ms - 500 and not moved:
        time.sleep(0.5)
        moved = assigned_partitions(kafka, service, cut.member(service)) == 0 and (
            assigned_partitions(kafka, service, direct.member(service)) > held
        )
    assert moved, f"the cut {service}'s {held} partitions never moved\n{direct.logs()}"
    sleep_until(heal_at_ms)
    proxy.enable()


def rejoined_after_s(fleet: Fleet, service: str, heal_at_ms: int) -> float:
    """Wait until the cut ``service`` holds partitions again by itself; seconds after the heal."""
    fleet.wait_ready([service], timeout_s=30)
    assert fleet.alive(service), f"the cut {service} exited\n{fleet.log(service)}"
    return (now_ms() - heal_at_ms) / 1000


def test_a_cut_timer_loses_its_partitions_and_rejoins_each_fire_once(
    kafka: KafkaSettings, proxy: Proxy, ledger: Ledger, tmp_path: Path
) -> None:
    cut = Fleet(kafka, tmp_path, name="cut")  # timer A, through the proxy
    direct = Fleet(kafka, tmp_path, name="direct")  # timer B and the executor
    try:
        cut.start("timer", KAFKRON_BOOTSTRAP_SERVERS=proxy.listen)
        direct.start("timer", "executor")
        first_ms = whole_second_ms(now_ms() + 2_000)
        cut_at_ms, heal_at_ms = first_ms + 4_000, first_ms + 4_000 + 15_000
        expected = submit(kafka, tmp_path / "view", first_ms, 28_000)
        sleep_until(cut_at_ms)  # A fires every second on its partition: a transaction open
        cut_until_moved(proxy, kafka, "timer", cut, direct, heal_at_ms)
        back_s = rejoined_after_s(cut, "timer", heal_at_ms)
        assert_one_final_each(ledger, direct, expected)
    finally:
        cut.stop(timeout_s=10)
        direct.stop()
    fires = read_ledger(kafka, "")
    counts = fires.fire_counts()
    assert set(counts) == set(expected), set(counts) ^ set(expected)
    assert not fires.doubled_fires(), f"DueEvents committed twice: {fires.doubled_fires()}"
    late = max(f.emitted_at_ms - f.scheduled_for_ms for f in fires.fires)
    print(
        f"timer cut {(heal_at_ms - cut_at_ms) / 1000:.0f} s (session {SESSION_TIMEOUT_S:.0f} s): "
        f"{len(expected)} DueEvents committed once each, one final outcome each; the cut timer "
        f"held partitions again {back_s:.1f} s after the heal; latest fire {late / 1000:.1f} s"
    )


DAG_PERIOD_MS = 2_000
DAG_DEPENDENTS = [node for node, upstreams in SIX_NODES.items() if upstreams]


def test_a_cut_dag_processor_loses_its_partitions_and_rejoins_each_release_once(
    kafka: KafkaSettings, proxy: Proxy, ledger: Ledger, tmp_path: Path
) -> None:
    cut = Fleet(kafka, tmp_path, name="cut")  # dag processor A, through the proxy
    direct = Fleet(kafka, tmp_path, name="direct")  # dag processor B, the timer, the executor
    releases = TopicReader(kafka, [DAG_RELEASES])
    try:
        cut.start("dag", KAFKRON_BOOTSTRAP_SERVERS=proxy.listen)
        direct.start("dag", "timer", "executor")
        first_ms = whole_second_ms(now_ms() + 3_000) // DAG_PERIOD_MS * DAG_PERIOD_MS
        keys = list(range(first_ms, first_ms + 26_000, DAG_PERIOD_MS))
        cut_at_ms, heal_at_ms = first_ms + 5_000, first_ms + 5_000 + 15_000
        # Two DAGs: their nodes spread over both partitions, so A owns runs in flight.
        prefixes = [f"dag{i}-" for i in range(2)]
        for prefix in prefixes:
            roots = cron_every(DAG_PERIOD_MS // 1000, first_ms, keys[-1] + 1)
            produce_jobs(kafka, dag_jobs(prefix, roots, "tests.effect", now_ms()))
        expected = {
            execution_id(p + node, key): key for p in prefixes for node in SIX_NODES for key in keys
        }
        sleep_until(cut_at_ms)
        cut_until_moved(proxy, kafka, "dag", cut, direct, heal_at_ms)
        back_s = rejoined_after_s(cut, "dag", heal_at_ms)
        assert_one_final_each(ledger, direct, expected)
        wanted = {(p + node, key) for p in prefixes for node in DAG_DEPENDENTS for key in keys}
        releases.wait_for(
            lambda r: len(r.records) >= len(wanted), timeout_s=30, what="every release"
        )
        releases.poll(2.0)  # a late copy would show here
    finally:
        releases.close()
        cut.stop(timeout_s=10)
        direct.stop()
    released = Counter(
        (r["job_id"], r["run_key_ms"])
        for r in releases.decoded(DAG_RELEASES, RecordKind.DAG_RELEASE)
    )
    verdicts = Counter(r["verdict"] for r in releases.decoded(DAG_RELEASES, RecordKind.DAG_RELEASE))
    assert set(released) == wanted, set(released) ^ wanted
    assert all(n == 1 for n in released.values()), {k: n for k, n in released.items() if n > 1}
    assert verdicts == {"RUN": len(wanted)}, verdicts
    runs = starts(direct.effects_path)
    started = Counter(r.execution_id for r in runs)
    assert set(started) == set(expected) and set(started.values()) == {1}, started
    print(
        f"dag processor cut {(heal_at_ms - cut_at_ms) / 1000:.0f} s (session "
        f"{SESSION_TIMEOUT_S:.0f} s): {len(wanted)} releases committed once each, "
        f"{len(expected)} runs one final outcome each, each run started once; the cut dag "
        f"processor held partitions again {back_s:.1f} s after the heal"
    )
