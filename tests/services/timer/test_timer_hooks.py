"""The timer's processor hooks on in-memory stores: runs of records, and per-record observers.

Pure logic: the processor context is a small fake with the calls the hooks use (stores,
produce, request_commit); the stores are the sorted dict fake of ``test_timer_logic``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from services.timer import keys
from services.timer.inputs import apply_input, apply_results, finish_inputs
from services.timer.retention import listed_jobs
from services.timer.scope import Scope, TimerEnv
from services.timer.service import JOBS_STORE, WHEEL_STORE, TimerHooks
from services.timer.settings import TimerSettings
from services.timer.state import load_state
from streams.codec import Codec, RecordKind
from streams.dead_letters import value_of
from streams.settings import KafkaSettings
from tests.services.timer.test_timer_logic import T0, FakeStore, one_off, result_bytes

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


def test_a_run_of_results_writes_its_retention_entry_once_with_every_finished_job() -> None:
    """The hooks apply a run of results in one scope: the finished one-offs' shared wheel
    entry is written at the end of the run, once, listing every job of the run."""
    ctx = FakeContext()
    hooks = TimerHooks(ENV)
    ids = [f"done-{i}" for i in range(5)]
    jobs = [one_off(job_id, T0 + 1_000) for job_id in ids]
    hooks.on_records(ctx, ENV.jobs_topic, 0, [  # type: ignore[arg-type]
        FakeRecord(job.job_id.encode(), CODEC.encode(RecordKind.JOB, job.to_avro()), i)
        for i, job in enumerate(jobs)
    ])  # fmt: skip
    hooks.on_punctuate(ctx, 0, T0 + 1_000)  # type: ignore[arg-type]
    assert len(ctx.out) == len(ids)  # the fast fires
    wheel = ctx.stores[WHEEL_STORE]
    writes: list[bytes] = []
    set_value = wheel.set

    def counted(key: bytes, value: bytes) -> None:
        writes.append(key)
        set_value(key, value)

    wheel.set = counted  # type: ignore[method-assign]
    results = [
        FakeRecord(job_id.encode(), result_bytes(job_id, T0 + 1_000, "SUCCEEDED", T0 + 1_200), i)
        for i, job_id in enumerate(ids)
    ]
    hooks.on_records(ctx, ENV.results_topic, 0, results)  # type: ignore[arg-type]
    [key] = [k for k in wheel.data if k[-1] == keys.TOMBSTONE]
    assert writes == [key]
    assert listed_jobs(key, wheel.data[key]) == [job_id.encode() for job_id in ids]
    for job_id in ids:
        state = load_state(scope_of(ctx), job_id.encode())
        assert state is not None and state.completed
        assert state.tombstone_fire_ms == keys.parse_key(key).fire_ms


def test_a_run_of_results_changes_stores_and_outputs_as_each_record_applied_alone() -> None:
    """``apply_results`` (the hooks' path for a run of ``job-results``) does what
    ``apply_input`` does for each record: finished one-offs, a STARTED, and dead letters with
    their offsets for a null key, a null value, bytes that are no result and a key that is
    not the result's job id."""
    ids = [f"run-{i}" for i in range(4)]

    def fired() -> FakeContext:
        ctx, hooks = FakeContext(), TimerHooks(ENV)
        ENV.tenant_ranks.forget(0)  # a fresh timer each time: the same ranks, the same bytes
        hooks.on_records(ctx, ENV.jobs_topic, 0, [  # type: ignore[arg-type]
            FakeRecord(job_id.encode(), CODEC.encode(RecordKind.JOB, job.to_avro()), i)
            for i, (job_id, job) in enumerate((j, one_off(j, T0 + 1_000)) for j in ids)
        ])  # fmt: skip
        hooks.on_punctuate(ctx, 0, T0 + 1_000)  # type: ignore[arg-type]
        return ctx

    def done(job_id: str, status: str = "SUCCEEDED") -> bytes:
        return result_bytes(job_id, T0 + 1_000, status, T0 + 1_200)

    def scope_at(ctx: FakeContext) -> Scope:
        return Scope(ENV, ctx.store(JOBS_STORE), ctx.store(WHEEL_STORE), ctx.produce, T0 + 1_500)

    records = [
        FakeRecord(b"run-0", done("run-0"), 10),
        FakeRecord(None, done("run-1"), 11),
        FakeRecord(b"run-1", None, 12),
        FakeRecord(b"run-1", b"not a result", 13),
        FakeRecord(b"run-2", done("run-1"), 14),
        FakeRecord(b"run-3", done("run-3", "STARTED"), 15),
        FakeRecord(b"run-1", done("run-1"), 16),
        FakeRecord(b"run-3", done("run-3"), 17),
    ]
    run_ctx = fired()
    run_scope = scope_at(run_ctx)
    apply_results(run_scope, 0, records)
    finish_inputs(run_scope)
    alone_ctx = fired()
    alone_scope = scope_at(alone_ctx)
    for record in records:
        apply_input(alone_scope, ENV.results_topic, 0, record.offset(), record.key(),
                    record.value())  # fmt: skip
    finish_inputs(alone_scope)
    assert run_ctx.out == alone_ctx.out
    out = run_ctx.out
    dead = [
        CODEC.decode(RecordKind.DEAD_LETTER, value_of(v)) for t, _, v in out if t == ENV.dlq_topic
    ]
    assert [d["source_offset"] for d in dead] == [11, 12, 13, 14]
    for name in (JOBS_STORE, WHEEL_STORE):
        assert run_ctx.stores[name].data == alone_ctx.stores[name].data
    for job_id in ("run-0", "run-1", "run-3"):
        state = load_state(scope_of(run_ctx), job_id.encode())
        assert state is not None and state.completed
    state = load_state(scope_of(run_ctx), b"run-2")
    assert state is not None and not state.completed
