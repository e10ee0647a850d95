"""The counter proof: exact counts through SIGKILLs, restarts and rebalances (real broker, RocksDB).

A counter processor (``processor_counter_app``) runs as a subprocess, counts records per key in
a store and emits each running total inside the same transaction. While a feeder thread
produces keyed records, the test kills and restarts processors. At the end, per key, the
committed totals must be exactly 1, 2, ..., n (no loss, no double count, in order), and the
final stores must hold n.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from streams.settings import KafkaSettings
from streams.state.changelog import changelog_topic
from streams.state.store import Store
from tests.streams.processor_testkit import (
    committed_offsets,
    create_topics,
    end_offsets,
    read_committed,
    uncounted_inputs,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
KEYS = 300


def group_of(settings: KafkaSettings) -> str:
    """The test's own consumer group, which also names the processes' transactional ids.

    Never shared with another test or with a concurrent run on the same broker: members of
    another run with the same transactional.id would fence these processes' producers.
    """
    return f"{settings.namespace}counter"


class CounterProcess:
    """One counter subprocess; its JSON events are read from a file it writes."""

    def __init__(self, settings: KafkaSettings, io: tuple[str, str], instance: str, state: Path):
        self.log = state.parent / f"{instance}-{time.monotonic_ns()}.jsonl"
        command = [
            sys.executable, "-m", "tests.streams.processor_counter_app",
            "--bootstrap", settings.bootstrap_servers, "--namespace", settings.namespace,
            "--group", group_of(settings), "--instance", instance, "--state-dir", str(state),
            "--input", io[0], "--output", io[1],
        ]  # fmt: skip
        with self.log.open("w") as out, self.log.with_suffix(".err").open("w") as err:
            self.process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err)

    def events(self, kind: str) -> list[dict[str, Any]]:
        lines = self.log.read_text().splitlines()
        return [e for e in map(json.loads, lines) if e["event"] == kind]

    def wait_event(self, kind: str, timeout_s: float = 40, after: float = 0.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            found = [e for e in self.events(kind) if e["t"] >= after]
            if found:
                return found[0]
            assert self.process.poll() is None, self.diagnose("exited early")
            assert time.monotonic() < deadline, self.diagnose(f"no {kind} event")
            time.sleep(0.05)

    def owned(self) -> set[int]:
        """Partitions restored and processing now, replayed from ready/revoked events."""
        owned: set[int] = set()
        for line in self.log.read_text().splitlines():
            event = json.loads(line)
            if event["event"] == "ready":
                owned.add(event["partition"])
            elif event["event"] == "revoked":
                owned.discard(event["partition"])
        return owned

    def wait_owns_all(self, partitions: int, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.owned()) < partitions:
            assert self.process.poll() is None, self.diagnose("exited early")
            assert time.monotonic() < deadline, self.diagnose("never owned every partition")
            time.sleep(0.05)

    def kill(self) -> float:
        killed_at = time.time()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        return killed_at

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(40) == 0, self.diagnose("unclean stop")

    def diagnose(self, what: str) -> str:
        err = self.log.with_suffix(".err").read_text()[-3000:]
        return f"{what}; events:\n{self.log.read_text()[-2000:]}\nstderr:\n{err}"


class Feeder(threading.Thread):
    """Produces ``total`` keyed records over ``duration_s``; remembers the count per key."""

    def __init__(self, settings: KafkaSettings, topic: str, total: int, duration_s: float):
        super().__init__(daemon=True)
        self.settings, self.topic, self.total, self.duration_s = settings, topic, total, duration_s
        self.expected: Counter[bytes] = Counter()
        self.rnd = random.Random(total)
        self.stopped = threading.Event()  # set when the test ends: stop feeding

    def run(self) -> None:
        producer = Producer(self.settings.client_config(partitioner="murmur2_random"))
        batch = 200
        pause = self.duration_s / (self.total / batch)
        for start in range(0, self.total, batch):
            if self.stopped.is_set():
                break
            keys = [b"key-%d" % self.rnd.randrange(KEYS) for _ in range(batch)]
            self.expected.update(keys)
            for key in keys:
                producer.produce(self.topic, key=key, value=b"%d" % start)
            assert producer.flush(30) == 0
            time.sleep(pause)


@pytest.fixture
def io(kafka_settings: KafkaSettings) -> tuple[str, str]:
    names = (kafka_settings.namespace + "in", kafka_settings.namespace + "totals")
    create_topics(kafka_settings, names)
    return names


Spawn = Callable[[str, Path], CounterProcess]
Feed = Callable[[int, float], Feeder]


@pytest.fixture
def feed(kafka_settings: KafkaSettings, io: tuple[str, str]) -> Iterator[Feed]:
    """Starts a feeder of the input topic; stopped and joined when the test ends.

    A failed test must not leave it producing into the next test (its topics are gone then).
    """
    started: list[Feeder] = []

    def start(total: int, duration_s: float) -> Feeder:
        started.append(Feeder(kafka_settings, io[0], total=total, duration_s=duration_s))
        started[-1].start()
        return started[-1]

    yield start
    for feeder in started:
        feeder.stopped.set()
        feeder.join(60)


@pytest.fixture
def spawn(kafka_settings: KafkaSettings, io: tuple[str, str]) -> Iterator[Spawn]:
    """Starts counter processes; any still running when the test ends is killed."""
    started: list[CounterProcess] = []

    def start(instance: str, state: Path) -> CounterProcess:
        started.append(CounterProcess(kafka_settings, io, instance, state))
        return started[-1]

    yield start
    for counter in started:  # a failed test must not leave processors running into the next
        if counter.process.poll() is None:
            counter.process.kill()
            counter.process.wait(10)


def wait_caught_up(settings: KafkaSettings, topic: str, timeout_s: float = 60) -> None:
    ends = end_offsets(settings, topic)
    deadline = time.monotonic() + timeout_s
    while (committed := committed_offsets(settings, group_of(settings), topic)) != ends:
        assert time.monotonic() < deadline, f"not caught up: committed {committed}, ends {ends}"
        time.sleep(0.25)


def assert_exact_counts(
    settings: KafkaSettings, io: tuple[str, str], expected: Counter[bytes], state: Path
) -> None:
    records = read_committed(settings, io[1])
    totals: dict[bytes, list[int]] = {}
    for record in records:
        assert record.key is not None and record.value is not None
        totals.setdefault(record.key, []).append(int(record.value))
    wrong = sorted(k for k, n in expected.items() if totals.get(k) != list(range(1, n + 1)))
    if wrong or set(totals) != set(expected):
        # Say which input records no committed total counts, to tell a skip from a double count.
        skipped = uncounted_inputs(read_committed(settings, io[0]), records)
        pytest.fail(
            f"{len(wrong)} keys not counted exactly once per input, e.g. {wrong[:3]}: "
            f"{[(k, len(totals.get(k, [])), expected[k]) for k in wrong[:3]]} (totals, inputs); "
            f"input offsets no committed total accounts for, per partition: {skipped}"
        )
    group = group_of(settings)
    store = Store("counts", group, state, changelog_topic(settings, group, "counts"))
    try:
        stored: dict[bytes, int] = {}
        for partition in range(settings.partitions):
            items = store.open_partition(partition).scan(b"", b"\xff", 10**6)
            stored.update({k: int.from_bytes(v, "big") for k, v in items})
    finally:
        store.close()
    assert stored == dict(expected)


def test_exact_counts_through_sigkill_and_restart(
    kafka_settings: KafkaSettings, io: tuple[str, str], tmp_path: Path, spawn: Spawn, feed: Feed
) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rnd = random.Random(seed)
    feeder = feed(30_000, 25)
    state = tmp_path / "a"
    current = spawn("a", state)
    for round_ in range(4):
        current.wait_event("first")
        time.sleep(rnd.uniform(0.2, 2.5))
        current.kill()
        if round_ % 2:  # lose the disk too: the restart rebuilds from the changelogs
            shutil.rmtree(state)
        current = spawn("a", state)
    feeder.join()
    current.wait_owns_all(kafka_settings.partitions)  # restored, so its disk is complete
    wait_caught_up(kafka_settings, io[0])
    current.stop()
    print(f"\nseed {seed}: {feeder.total} records, 4 SIGKILLs")
    assert_exact_counts(kafka_settings, io, feeder.expected, state)


def test_exact_counts_through_rebalances_and_failover(
    kafka_settings: KafkaSettings, io: tuple[str, str], tmp_path: Path, spawn: Spawn, feed: Feed
) -> None:
    feeder = feed(36_000, 30)
    first = spawn("a", tmp_path / "a")
    first.wait_event("first")
    time.sleep(1.0)

    second = spawn("b", tmp_path / "b")  # one to two
    moved = second.wait_event("first")["partition"]
    time.sleep(1.0)
    stopped_at = time.time()
    second.stop()  # two to one, cleanly: commit before revoke
    handoff = first.wait_event("first", after=stopped_at)["t"] - stopped_at

    second = spawn("b", tmp_path / "b")  # stale disk: partial restore
    second.wait_event("first")
    time.sleep(1.0)
    killed_at = second.kill()  # two to one, by SIGKILL
    ready = first.wait_event("ready", after=killed_at)["t"] - killed_at
    failover = first.wait_event("first", after=killed_at, timeout_s=60)["t"] - killed_at
    feeder.join()
    wait_caught_up(kafka_settings, io[0])
    first.wait_owns_all(kafka_settings.partitions)
    first.stop()
    print(
        f"\nmoved p{moved}; clean handoff {handoff:.1f}s; SIGKILL failover: assigned after "
        f"{ready:.1f}s, processing after {failover:.1f}s"
    )
    assert failover < 30
    assert_exact_counts(kafka_settings, io, feeder.expected, tmp_path / "a")


@pytest.mark.parametrize(
    "stall_s",
    [
        pytest.param(8, id="fenced-member"),  # past the session: stale member epoch, abort
        pytest.param(12, id="fenced-producer"),  # past the transaction timeout: new producer
    ],
)
def test_exact_counts_when_a_stalled_member_comes_back_as_a_zombie(
    kafka_settings: KafkaSettings,
    io: tuple[str, str],
    tmp_path: Path,
    spawn: Spawn,
    feed: Feed,
    stall_s: float,
) -> None:
    feeder = feed(24_000, 24)
    first = spawn("a", tmp_path / "a")
    first.wait_event("first")
    second = spawn("b", tmp_path / "b")
    second.wait_event("first")
    time.sleep(1.0)
    # Stalled past the session (6 s), and maybe the transaction timeout (10 s): the group moves
    # its partitions and the broker may abort its transaction, while the process lives on.
    second.process.send_signal(signal.SIGSTOP)
    stalled_at = time.time()
    first.wait_event("first", after=stalled_at, timeout_s=30)
    time.sleep(max(0.0, stalled_at + stall_s - time.time()))
    second.process.send_signal(signal.SIGCONT)
    resumed_at = time.time()
    second.wait_event("ready", after=resumed_at, timeout_s=40)  # fenced, recovered, rejoined
    feeder.join()
    wait_caught_up(kafka_settings, io[0])
    second.stop()
    first.wait_owns_all(kafka_settings.partitions)
    wait_caught_up(kafka_settings, io[0])
    first.stop()
    assert_exact_counts(kafka_settings, io, feeder.expected, tmp_path / "a")
