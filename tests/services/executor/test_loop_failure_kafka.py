"""An executor whose loop ends on an unexpected exception, against the real broker.

A commit that raises (as dedup's ``struct.error`` did for a DueEvent with attempt -1), a
record's run that raises past the handler's error handling, and the waiting rest of a run
that does: the executor leaves the group, commits nothing after the failure, and ``serve``
raises that very exception (the compiled loop raised a TypeError from its close instead).
The next executor runs every record the failed one had not committed.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient

import services.executor.handlers
import streams.state.transaction
from services.executor.context import HandlerContext
from services.executor.handlers import RegisteredHandler
from services.executor.service import build_registry
from streams import native
from streams.settings import KafkaSettings
from streams.state.transaction import StoreTransaction
from streams.topics import Priority, TopicNames

from .test_loop_kafka import Calls
from .test_service_kit import (
    ExecutorThread,
    TopicReader,
    due_event,
    executor_settings,
    finals,
    produce_due,
)

pytestmark = pytest.mark.kafka


class Crash(BaseException):
    """Not an Exception: past ``except Exception`` around a handler, as a bug would be."""


class Executors:
    """Executors on threads, stopped at teardown (a failed one has stopped already)."""

    def __init__(self, topics: KafkaSettings, calls: Calls) -> None:
        self.topics, self.calls = topics, calls
        self.started: list[ExecutorThread] = []
        self.crash_once: set[str] = set()  # execution ids whose run raises Crash once
        self.broken_once: set[str] = set()  # handler names whose resolution raises once

    async def crash_later(self, ctx: HandlerContext) -> None:
        await self.calls.record(ctx)
        await asyncio.sleep(0.05)  # the run waits: it is the rest of the run that raises
        if ctx.execution_id in self.crash_once:
            self.crash_once.discard(ctx.execution_id)
            raise Crash(f"{ctx.execution_id} crashed")

    def start(self, worker: str) -> ExecutorThread:
        settings = executor_settings(self.topics, worker)
        registry = build_registry(settings)
        registry.register("tests.record", self.calls.record)
        registry.register("tests.broken", self.calls.record)
        registry.register("tests.crash", self.crash_later)
        resolve = registry.resolve

        def resolve_or_break(name: str) -> RegisteredHandler:
            if name in self.broken_once:
                self.broken_once.discard(name)
                raise RuntimeError(f"resolving {name} broke")
            return resolve(name)

        registry.resolve = resolve_or_break  # type: ignore[method-assign]
        executor = ExecutorThread(settings, registry).start()
        self.started.append(executor)
        executor.wait_ready(self.topics.partitions)
        return executor

    def stop_all(self) -> None:
        for executor in self.started:
            executor.stop_event.set()
        for executor in self.started:
            executor._thread.join(60)


@pytest.fixture
def executors(topics: KafkaSettings, calls: Calls) -> Iterator[Executors]:
    running = Executors(topics, calls)
    yield running
    running.stop_all()


def failure_of(executor: ExecutorThread, timeout_s: float = 60.0) -> BaseException:
    """What ended ``executor`` by itself (no stop was asked), once it has closed."""
    executor._thread.join(timeout_s)
    assert not executor._thread.is_alive(), "the executor went on after the failure"
    assert len(executor.errors) == 1, executor.errors
    error = executor.errors[0]
    chained: BaseException | None = error
    while chained is not None:  # the close must not have raised over it
        assert not isinstance(chained, TypeError), error
        chained = chained.__context__
    return error


def members(topics: KafkaSettings, group: str) -> list[str]:
    """Client ids of the members of ``group`` now."""
    admin = AdminClient(topics.client_config())
    description = admin.describe_consumer_groups([group], request_timeout=30)[group].result()
    return [m.client_id for m in description.members]


def committed(topics: KafkaSettings, group: str, topic: str, partition: int) -> int:
    """The group's committed position of ``topic[partition]`` (negative: none)."""
    admin = AdminClient(topics.client_config())
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, partition)])]
    result = admin.list_consumer_group_offsets(request)[group].result()
    return int(result.topic_partitions[0].offset)


def final_by(results: list[dict[str, Any]], execution_id: str) -> list[str]:
    return [
        r["worker_id"]
        for r in results
        if r["execution_id"] == execution_id and r["status"] in ("SUCCEEDED", "DEAD_LETTER")
    ]


def test_a_commit_that_raises_ends_the_executor_with_its_error_and_the_record_runs_again(
    topics: KafkaSettings,
    executors: Executors,
    calls: Calls,
    reader: TopicReader,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not native.compiled(streams.state.transaction)  # patched below: must be Python
    prepare = StoreTransaction.prepare
    armed = [True]

    def out_of_range(self: StoreTransaction, producer: Any) -> None:
        if armed[0]:
            raise struct.error("argument out of range")
        prepare(self, producer)

    monkeypatch.setattr(StoreTransaction, "prepare", out_of_range)
    first = executors.start("w0")
    event = due_event("fails-at-commit", handler="tests.record")
    produce_due(topics, [event])

    error = failure_of(first)
    assert isinstance(error, struct.error) and "argument out of range" in str(error)
    assert "w0" not in members(topics, first.settings.group_id())  # its consumer closed
    armed[0] = False

    executors.start("w1")
    execution_id = event["execution_id"]
    reader.wait_for(lambda r: finals(r.results())[execution_id] == 1, 60, "the run again")
    assert [c.worker_id for c in calls.calls if c.execution_id == execution_id] == ["w0", "w1"]
    assert final_by(reader.results(), execution_id) == ["w1"]  # w0's transaction: aborted


@pytest.mark.parametrize("where", ["start", "rest"])
def test_a_run_that_raises_ends_the_executor_with_its_error_and_nothing_after_it_commits(
    topics: KafkaSettings,
    executors: Executors,
    calls: Calls,
    reader: TopicReader,
    where: str,
) -> None:
    """``start``: the run raises before its handler runs (resolving it broke), its offset
    already passed; ``rest``: the handler raises a BaseException after it waited."""
    assert not native.compiled(services.executor.handlers)  # its resolve is replaced
    first = executors.start("w0")
    if where == "start":
        failing = due_event("fails", handler="tests.broken")
        executors.broken_once.add("tests.broken")
    else:
        failing = due_event("fails", handler="tests.crash")
        executors.crash_once.add(failing["execution_id"])
    before = due_event("before", handler="tests.record")
    after = due_event("after", handler="tests.record")
    landed = produce_due(topics, [before, failing, after], partition=0)

    error = failure_of(first)
    expected = RuntimeError if where == "start" else Crash
    assert isinstance(error, expected), error
    group = first.settings.group_id()
    assert "w0" not in members(topics, group)
    due_normal = TopicNames(topics.namespace).due(Priority.NORMAL)
    assert committed(topics, group, due_normal, 0) <= landed[1][2]  # never past the failed one

    executors.start("w1")
    ids = [e["execution_id"] for e in (before, failing, after)]
    reader.wait_for(lambda r: all(finals(r.results())[i] == 1 for i in ids), 60, "the records")
    assert final_by(reader.results(), failing["execution_id"]) == ["w1"]
    assert all(calls.count(i) >= 1 for i in ids)
