"""The timer's processor hooks on in-memory stores: runs of records, and per-record observers.

Pure logic: the processor context is a small fake with the calls the hooks use (stores,
produce, request_commit); the stores are the sorted dict fake of ``test_timer_logic``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.timer.scope import Scope, TimerEnv
from services.timer.service import JOBS_STORE, WHEEL_STORE, TimerHooks
from services.timer.settings import TimerSettings
from services.timer.state import load_state
from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings
from tests.services.timer.test_timer_logic import T0, FakeStore, one_off

CODEC = Codec.from_directory()
ENV = TimerEnv.from_settings(
    TimerSettings(kafka=KafkaSettings(namespace="k."), instance_id="hooks"), CODEC
)


@dataclass
class FakeRecord:
    """A consumed record as the runtime hands it to ``on_records``."""

    _key: bytes | None
    _value: bytes | None
    _offset: int
    _timestamp_ms: int = T0

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int | None:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return 1, self._timestamp_ms


@dataclass
class FakeContext:
    """The parts of ``ProcessorContext`` the timer's hooks call."""

    stores: dict[str, FakeStore] = field(
        default_factory=lambda: {JOBS_STORE: FakeStore(), WHEEL_STORE: FakeStore()}
    )
    out: list[tuple[str, bytes | None, bytes | None]] = field(default_factory=list)

    def store(self, name: str) -> FakeStore:
        return self.stores[name]

    def produce(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.out.append((topic, key, value))

    def produce_many(self, records: list[tuple[str, bytes | None, bytes | None]]) -> None:
        self.out.extend(records)

    def request_commit(self, within_ms: int = 0) -> None:
        pass


def creates(count: int, first_offset: int = 0) -> list[FakeRecord]:
    records = []
    for i in range(count):
        job = one_off(f"job-{first_offset + i}", T0 + 3_600_000 + first_offset + i)
        value = CODEC.encode(RecordKind.JOB, job.to_avro())
        records.append(FakeRecord(job.job_id.encode(), value, first_offset + i))
    return records


def scope_of(ctx: FakeContext) -> Scope:
    return Scope(ENV, ctx.store(JOBS_STORE), ctx.store(WHEEL_STORE), ctx.produce, T0)


def test_a_run_of_creates_schedules_each_job_and_dead_letters_carry_their_offset() -> None:
    ctx = FakeContext()
    records = [*creates(3), FakeRecord(b"bad", b"not avro", 3), *creates(1, 4)]
    TimerHooks(ENV).on_records(ctx, ENV.jobs_topic, 0, records)  # type: ignore[arg-type]
    for i in (0, 1, 2, 4):
        state = load_state(scope_of(ctx), f"job-{i}".encode())
        assert state is not None and state.sched_tick_ms == T0 + 3_600_000 + i and state.fast
    assert len(ctx.stores[WHEEL_STORE].data) == 4
    (dead,) = [CODEC.decode(RecordKind.DEAD_LETTER, v) for t, _, v in ctx.out if v is not None]
    assert dead["source_offset"] == 3 and dead["raw_value"] == b"not avro"


def test_a_subclass_observing_each_record_still_sees_every_record() -> None:
    seen: list[bytes | None] = []

    class Observing(TimerHooks):
        def on_record(self, ctx: Any, topic: str, partition: int, key: bytes | None,
                      value: bytes | None, timestamp_ms: int) -> None:  # fmt: skip
            seen.append(key)
            super().on_record(ctx, topic, partition, key, value, timestamp_ms)

    ctx = FakeContext()
    records = creates(4)
    Observing(ENV).on_records(ctx, ENV.jobs_topic, 0, records)  # type: ignore[arg-type]
    assert seen == [record.key() for record in records]
    assert len(ctx.stores[WHEEL_STORE].data) == 4
