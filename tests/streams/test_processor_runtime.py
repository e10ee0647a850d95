"""The processor runtime in-process against the real broker: hooks, restore, commit, failures."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from streams.processing import InputRecord, ProcessorContext, ProcessorHookError
from streams.processor import Processor, ProcessorOptions
from streams.settings import KafkaSettings
from streams.state.changelog import changelog_topic
from streams.state.store import Store
from tests.streams.processor_testkit import (
    committed_offsets,
    create_topics,
    produce_keyed,
    read_committed,
)

pytestmark = pytest.mark.kafka
GROUP = "rt"


class Hooks:
    """Sums values per key in store ``sums``; punctuation emits the partition's key count."""

    def __init__(self, output: str, poison: bytes | None = None) -> None:
        self.output, self.poison = output, poison
        self.assigned: list[int] = []
        self.punctuated: set[int] = set()
        self.revoked: list[int] = []

    def on_record(
        self,
        ctx: ProcessorContext,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
    ) -> None:
        assert key is not None and value is not None and timestamp_ms > 0
        if value == self.poison:
            raise ValueError("cannot handle this record")
        sums = ctx.store("sums")
        total = int(sums.get(key) or b"0") + int(value)
        sums.set(key, str(total).encode())
        ctx.produce(self.output, key, str(total).encode())

    def on_punctuate(self, ctx: ProcessorContext, partition: int, now_ms: int) -> None:
        if partition not in self.punctuated:
            self.punctuated.add(partition)
            keys = len(ctx.store("sums").iter_range(b"", b"\xff", 10_000))
            ctx.produce(self.output, b"tick", str(keys).encode())
            ctx.request_commit()

    def on_assigned(self, partition: int) -> None:
        self.assigned.append(partition)

    def on_revoked(self, partition: int) -> None:
        self.revoked.append(partition)


class BatchHooks(Hooks):
    """The same hooks given runs of records of one topic partition (``on_records``)."""

    def __init__(self, output: str, poison: bytes | None = None) -> None:
        super().__init__(output, poison)
        self.runs: list[tuple[str, int, list[int]]] = []

    def on_records(
        self,
        ctx: ProcessorContext,
        topic: str,
        partition: int,
        records: Sequence[InputRecord],
    ) -> None:
        offsets = [record.offset() or 0 for record in records]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))  # no gap, in order
        self.runs.append((topic, partition, offsets))
        for record in records:
            self.on_record(
                ctx, topic, partition, record.key(), record.value(), record.timestamp()[1]
            )


@pytest.fixture
def io(kafka_settings: KafkaSettings) -> tuple[str, str]:
    names = (kafka_settings.namespace + "in", kafka_settings.namespace + "out")
    create_topics(kafka_settings, names)
    return names


@contextmanager
def running(processor: Processor) -> Iterator[list[BaseException]]:
    stop, errors = threading.Event(), []

    def target() -> None:
        try:
            processor.run(stop)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    try:
        yield errors
    finally:
        stop.set()
        thread.join(60)
        assert not thread.is_alive()


def wait_for(condition: Callable[[], bool], timeout_s: float = 40) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def make(settings: KafkaSettings, io: tuple[str, str], hooks: Hooks, **opts: int) -> Processor:
    options = ProcessorOptions(**{"commit_interval_ms": 300, **opts})  # type: ignore[arg-type]
    return Processor(settings, GROUP, "one", [io[0]], ["sums"], hooks, options)


@pytest.mark.parametrize("hooks_class", [Hooks, BatchHooks])
def test_process_commit_restore_and_punctuate(
    kafka_settings: KafkaSettings, io: tuple[str, str], tmp_path: Path, hooks_class: type[Hooks]
) -> None:
    records = [(b"k%d" % (i % 20), b"%d" % i) for i in range(400)]
    produce_keyed(kafka_settings, io[0], records)
    expected = {k: 0 for k, _ in records}
    for k, v in records:
        expected[k] += int(v)
    hooks = hooks_class(io[1])
    processor = make(kafka_settings, io, hooks)
    with running(processor) as errors:
        wait_for(lambda: sum(committed_offsets(kafka_settings, GROUP, io[0]).values()) == 400)
        assert sorted(processor.ready_partitions()) == [0, 1, 2, 3]
    assert not errors and sorted(hooks.assigned) == [0, 1, 2, 3]
    assert sorted(hooks.revoked) == [0, 1, 2, 3]  # a clean stop revokes (after committing)
    assert hooks.punctuated == {0, 1, 2, 3}
    if isinstance(hooks, BatchHooks):  # every record came in a run, most runs of several
        assert sum(len(offsets) for _, _, offsets in hooks.runs) == 400
        assert max(len(offsets) for _, _, offsets in hooks.runs) > 1
    totals = {r.key: int(r.value or b"0") for r in read_committed(kafka_settings, io[1])}
    assert {k: v for k, v in totals.items() if k != b"tick"} == expected

    # A new instance on an empty disk restores every partition before it is assigned.
    moved = kafka_settings.model_copy(update={"state_dir": tmp_path / "elsewhere"})
    seen: dict[int, int] = {}

    class Probe(Hooks):
        def on_punctuate(self, ctx: ProcessorContext, partition: int, now_ms: int) -> None:
            seen.setdefault(partition, len(ctx.store("sums").iter_range(b"", b"\xff", 10_000)))

    second = make(moved, io, Probe(io[1]))
    with running(second) as errors:
        wait_for(lambda: len(seen) == 4)
    assert not errors and sum(seen.values()) == len(expected)
    changelog = changelog_topic(kafka_settings, GROUP, "sums")
    changes = len(read_committed(kafka_settings, changelog))
    assert sum(p.applied for p in second.recovery_progress()) == changes >= len(expected)
    store = Store("sums", GROUP, moved.state_dir, changelog)
    try:
        restored = {}
        for partition in range(4):
            restored.update(dict(store.open_partition(partition).scan(b"", b"\xff", 10_000)))
        assert {k: int(v) for k, v in restored.items()} == expected
    finally:
        store.close()


@pytest.mark.parametrize("hooks_class", [Hooks, BatchHooks])
def test_hook_error_aborts_and_stops_without_losing_records(
    kafka_settings: KafkaSettings, io: tuple[str, str], hooks_class: type[Hooks]
) -> None:
    produce_keyed(kafka_settings, io[0], [(b"k%d" % i, b"1") for i in range(50)])
    produce_keyed(kafka_settings, io[0], [(b"k7", b"poison")])
    produce_keyed(kafka_settings, io[0], [(b"k%d" % i, b"1") for i in range(50)])
    poisoned = hooks_class(io[1], poison=b"poison")
    processor = make(kafka_settings, io, poisoned, commit_interval_ms=60_000)
    with running(processor) as errors:
        wait_for(lambda: bool(errors))
    assert isinstance(errors[0], ProcessorHookError) and "cannot handle" in str(errors[0])
    assert committed_offsets(kafka_settings, GROUP, io[0]) == {p: 0 for p in range(4)}
    assert not [r for r in read_committed(kafka_settings, io[1]) if r.key != b"tick"]

    fixed = make(kafka_settings, io, hooks_class(io[1], poison=None))
    fixed._hooks.on_record = skip_poison(fixed._hooks.on_record)  # type: ignore[method-assign]
    with running(fixed) as errors:
        wait_for(lambda: sum(committed_offsets(kafka_settings, GROUP, io[0]).values()) == 101)
    outputs = [r for r in read_committed(kafka_settings, io[1]) if r.key != b"tick"]
    assert not errors and len(outputs) == 100


def skip_poison(on_record: Callable[..., None]) -> Callable[..., None]:
    def wrapped(ctx: ProcessorContext, topic: str, partition: int, key: bytes, value: bytes,
                timestamp_ms: int) -> None:  # fmt: skip
        if value != b"poison":
            on_record(ctx, topic, partition, key, value, timestamp_ms)

    return wrapped
