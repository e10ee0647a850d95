"""Pure parts of the executor service: outcome records, result bytes, dedup rules, lanes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.due_events import due_event_record
from services.executor.backoff import RetryPolicy, retry_delay_ms
from services.executor.dedup import DedupEntry, DedupStore, Progress, entry_after, skip_reason
from services.executor.exceptions import HandlerNotFoundError
from services.executor.lane_buffers import LaneBuffers
from services.executor.outcomes import (
    attempt_outputs,
    started_result,
    undecodable_dead_letter,
)
from services.executor.result_bytes import ResultEncoder
from services.executor.runner import RunOutcome, RunStatus, failed_outcome
from services.executor.settings import ExecutorSettings
from streams.codec import Codec, RecordKind
from streams.dlq import replay_due_event
from streams.records import ExecutionStatus, Trigger
from streams.topics import Priority
from tests.services.executor.support import RecordingProducer

CODEC = Codec.from_directory()
NOW = 1_780_000_000_000


def event(**overrides: Any) -> dict[str, Any]:
    record = due_event_record(
        "job-1",
        1_700_000_000_000,
        job_version=4,
        fire_at_ms=1_700_000_000_100,
        timeout_ms=5000,
        priority="HIGH",
        emitted_at_ms=1_700_000_000_120,
    )
    record.update(overrides)
    return CODEC.decode(RecordKind.DUE_EVENT, CODEC.encode(RecordKind.DUE_EVENT, record))


def outcome(status: RunStatus, *, retryable: bool = True, error: str | None = "boom") -> RunOutcome:
    if status is RunStatus.SUCCEEDED:
        return RunOutcome(status, None, False, None, NOW - 50, NOW - 10)
    return RunOutcome(status, error, retryable, None, NOW - 50, NOW - 10)


def encodes(kind: RecordKind, record: dict[str, Any]) -> dict[str, Any]:
    """The record after an encode/decode round trip (proves it fits the schema)."""
    return CODEC.decode(kind, CODEC.encode(kind, record))


def test_success_is_one_final_result() -> None:
    outputs = attempt_outputs(event(), outcome(RunStatus.SUCCEEDED), "w1", NOW)
    assert outputs.final and outputs.retry_request is None and outputs.dead_letter is None
    result = encodes(RecordKind.EXECUTION_RESULT, outputs.result)
    assert result["status"] == "SUCCEEDED" and result["attempt"] == 1
    assert (result["started_at_ms"], result["finished_at_ms"]) == (NOW - 50, NOW - 10)
    assert result["worker_id"] == "w1" and result["job_version"] == 4
    assert result["recorded_at_ms"] == NOW and result["next_attempt_at_ms"] is None


def test_started_result() -> None:
    result = encodes(RecordKind.EXECUTION_RESULT, started_result(event(), "w1", NOW))
    assert result["status"] == "STARTED" and result["started_at_ms"] == NOW
    assert result["finished_at_ms"] is None and result["trigger"] == "SCHEDULE"


@pytest.mark.parametrize("status", [RunStatus.FAILED, RunStatus.TIMED_OUT])
def test_retryable_failure_schedules_the_next_attempt(status: RunStatus) -> None:
    due = event(attempt=2, history=[{"attempt": 1, "status": "FAILED", "error": "first"}])
    outputs = attempt_outputs(due, outcome(status), "w1", NOW)
    assert not outputs.final and outputs.dead_letter is None
    result = encodes(RecordKind.EXECUTION_RESULT, outputs.result)
    delay = retry_delay_ms(RetryPolicy.from_record(due["retry"]), 2, due["execution_id"])
    assert 1800 <= delay <= 2200  # 1000 ms x 2^(2-1), +/- 10 %
    assert result["status"] == status.value and result["next_attempt_at_ms"] == NOW + delay
    request = encodes(RecordKind.RETRY_REQUEST, outputs.retry_request or {})
    nxt = request["due"]
    assert request["requested_at_ms"] == NOW
    assert (nxt["attempt"], nxt["trigger"], nxt["fire_at_ms"]) == (3, "RETRY", NOW + delay)
    assert nxt["execution_id"] == due["execution_id"] and nxt["emitted_at_ms"] == NOW
    assert [h["attempt"] for h in nxt["history"]] == [1, 2]
    assert nxt["history"][-1]["status"] == status.value and nxt["history"][-1]["error"] == "boom"


def test_handler_retry_after_raises_the_delay() -> None:
    slow = RunOutcome(RunStatus.FAILED, "busy", True, 30.0, NOW - 5, NOW)
    outputs = attempt_outputs(event(), slow, "w1", NOW)
    assert outputs.result["next_attempt_at_ms"] == NOW + 30_000


def test_last_attempt_is_dead_lettered_with_its_history() -> None:
    history = [
        {"attempt": 1, "status": "FAILED", "error": "e1", "worker_id": "w0",
         "started_at_ms": 1, "finished_at_ms": 2},
        {"attempt": 2, "status": "TIMED_OUT", "error": "e2", "worker_id": "w0",
         "started_at_ms": 3, "finished_at_ms": 4},
    ]  # fmt: skip
    last = event(attempt=3, history=history)
    outputs = attempt_outputs(last, outcome(RunStatus.FAILED), "w", NOW)
    assert outputs.final and outputs.retry_request is None
    result = encodes(RecordKind.EXECUTION_RESULT, outputs.result)
    assert result["status"] == "DEAD_LETTER" and result["error"] == "boom"
    assert "attempt 3 of 3" in (result["reason"] or "")
    dead = encodes(RecordKind.DEAD_LETTER, outputs.dead_letter or {})
    assert dead["kind"] == "EXECUTION" and dead["last_error"] == "boom"
    assert dead["dead_at_ms"] == NOW and dead["reason"] == result["reason"]
    assert [h["attempt"] for h in dead["execution"]["history"]] == [1, 2, 3]
    assert dead["execution"]["attempt"] == 3


def test_unknown_handler_is_dead_at_the_first_attempt() -> None:
    failed = failed_outcome(HandlerNotFoundError("nope.missing", ["examples.noop"]))
    outputs = attempt_outputs(event(handler="nope.missing"), failed, "w1", NOW)
    assert outputs.final and outputs.dead_letter is not None
    assert "non-retryable" in outputs.result["reason"]
    assert "no handler named 'nope.missing'" in outputs.result["error"]


def test_undecodable_dead_letter_keeps_the_raw_record() -> None:
    record = undecodable_dead_letter("bad magic", "ns.due.low", 3, 17, b"k", b"\x00garbage", NOW)
    dead = encodes(RecordKind.DEAD_LETTER, record)
    assert dead["kind"] == "UNDECODABLE" and dead["execution"] is None
    assert (dead["source_topic"], dead["source_partition"], dead["source_offset"]) == (
        "ns.due.low", 3, 17,
    )  # fmt: skip
    assert (dead["raw_key"], dead["raw_value"]) == (b"k", b"\x00garbage")


def test_replay_is_attempt_one_again() -> None:
    dead = event(attempt=3, trigger="RETRY", history=[{"attempt": 1, "status": "FAILED"}])
    replayed = encodes(RecordKind.DUE_EVENT, replay_due_event(dead, NOW))
    assert (replayed["attempt"], replayed["trigger"], replayed["history"]) == (1, "REPLAY", [])
    assert replayed["execution_id"] == dead["execution_id"] and replayed["emitted_at_ms"] == NOW
    assert replayed["retry"] == dead["retry"] and replayed["priority"] == "HIGH"


# --- spliced ExecutionResult bytes -----------------------------------------------------

optional_text = st.none() | st.text(max_size=300)
optional_long = st.none() | st.integers(-(2**63), 2**63 - 1)
results = st.fixed_dictionaries(
    {
        "execution_id": st.text(max_size=80),
        "job_id": st.text(max_size=80),
        "scheduled_for_ms": st.integers(-(2**63), 2**63 - 1),
        "attempt": st.integers(-(2**31), 2**31 - 1),
        "status": st.sampled_from([s.value for s in ExecutionStatus]),
        "reason": optional_text,
        "error": optional_text,
        "worker_id": optional_text,
        "started_at_ms": optional_long,
        "finished_at_ms": optional_long,
        "next_attempt_at_ms": optional_long,
        "trigger": st.sampled_from([t.value for t in Trigger]),
        "job_version": st.integers(-(2**63), 2**63 - 1),
        "recorded_at_ms": st.integers(-(2**63), 2**63 - 1),
    }
)


def test_result_encoder_splices_for_the_current_schema() -> None:
    assert ResultEncoder(CODEC).spliced


@settings(max_examples=400, deadline=None)
@given(record=results)
def test_spliced_result_bytes_equal_what_fastavro_writes(record: dict[str, Any]) -> None:
    assert ResultEncoder(CODEC).encode(record) == CODEC.encode(RecordKind.EXECUTION_RESULT, record)


def test_result_encoder_falls_back_when_the_layout_differs(tmp_path: Path) -> None:
    schemas = Path(__file__).resolve().parents[3] / "schemas"
    for path in schemas.glob("*.avsc"):
        (tmp_path / path.name).write_text(path.read_text())
    schema = json.loads((schemas / "execution_result.v1.avsc").read_text())
    schema["fields"].append({"name": "extra", "type": "long", "default": 7})
    (tmp_path / "execution_result.v2.avsc").write_text(json.dumps(schema))
    codec = Codec.from_directory(tmp_path)
    encoder = ResultEncoder(codec)
    record = started_result(event(), "w", NOW)
    assert not encoder.spliced
    assert encoder.encode(record) == codec.encode(RecordKind.EXECUTION_RESULT, record)


# --- dedup rules and store -------------------------------------------------------------


def test_dedup_skips_final_executions_and_attempts_already_run() -> None:
    done = DedupEntry(Progress.SUCCEEDED, 2, 0)
    assert skip_reason(None, event()) is None
    assert skip_reason(done, event(attempt=3, trigger="RETRY")) is not None
    assert skip_reason(DedupEntry(Progress.DEAD_LETTER, 3, 0), event(attempt=1)) is not None
    failed = DedupEntry(Progress.RETRY_SCHEDULED, 2, 0)
    assert skip_reason(failed, event(attempt=2, trigger="RETRY")) is not None
    assert skip_reason(failed, event(attempt=3, trigger="RETRY")) is None


def test_dedup_lets_each_replay_of_a_dead_execution_through_once() -> None:
    dead = DedupEntry(Progress.DEAD_LETTER, 3, 0)
    replay = event(trigger="REPLAY", emitted_at_ms=NOW)
    assert skip_reason(dead, replay) is None
    after = entry_after(replay, Progress.DEAD_LETTER, dead)
    assert after == DedupEntry(Progress.DEAD_LETTER, 1, NOW)
    assert skip_reason(after, replay) is not None  # the same replay delivered again
    assert skip_reason(after, event(trigger="REPLAY", emitted_at_ms=NOW + 1)) is None
    succeeded = entry_after(replay, Progress.SUCCEEDED, dead)
    assert skip_reason(succeeded, event(trigger="REPLAY", emitted_at_ms=NOW + 2)) is not None
    retrying = entry_after(replay, Progress.RETRY_SCHEDULED, dead)
    retry = event(attempt=2, trigger="RETRY")
    assert skip_reason(retrying, retry) is None
    assert entry_after(retry, Progress.DEAD_LETTER, retrying).replay_mark == NOW


def test_dedup_store_writes_through_its_changelog_and_survives_reopening(tmp_path: Path) -> None:
    store = DedupStore("g", tmp_path, "ns.changelog.g.dedup")
    store.store.open_partition(2)
    entry = DedupEntry(Progress.SUCCEEDED, 1, 0)
    store.record(2, "job-1@1", entry)
    assert store.lookup(2, "job-1@1") == entry and store.dirty  # visible before commit
    producer = RecordingProducer()
    store.prepare(producer)  # type: ignore[arg-type]
    assert producer.records == [("ns.changelog.g.dedup", b"job-1@1", entry.encode(), 2)]
    store.flush(producer)  # type: ignore[arg-type]
    store.record(2, "job-2@1", entry)
    store.discard()  # an aborted transaction leaves nothing
    store.close()
    reopened = DedupStore("g", tmp_path, "ns.changelog.g.dedup")
    reopened.store.open_partition(2)
    assert reopened.lookup(2, "job-1@1") == entry
    assert reopened.lookup(2, "job-2@1") is None
    assert reopened.store.partition(2).changelog_offset() == 0
    reopened.close()


# --- lane buffers ------------------------------------------------------------------------


class FakeMessage:
    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self._where = (topic, partition, offset)

    def topic(self) -> str:
        return self._where[0]

    def partition(self) -> int:
        return self._where[1]

    def offset(self) -> int:
        return self._where[2]


LANE_OF = {"due.high": Priority.HIGH, "due.normal": Priority.NORMAL, "due.low": Priority.LOW}


def test_lane_buffers_prefer_high_but_bound_starvation() -> None:
    buffers = LaneBuffers(LANE_OF, capacity=1000)
    for i in range(40):
        for topic in LANE_OF:
            buffers.add(FakeMessage(topic, 0, i))  # type: ignore[arg-type]
    order = [buffers.take().topic() for _ in range(120)]  # type: ignore[union-attr]
    assert buffers.take() is None and len(buffers) == 0
    assert order[:2] == ["due.high", "due.high"]
    for topic, bound in (("due.normal", 8), ("due.low", 32)):
        picks = [i for i, t in enumerate(order) if t == topic]
        gaps = [b - a - 1 for a, b in zip([-1, *picks], picks, strict=False)]
        assert max(gaps) <= bound, (topic, gaps)
    assert order.index("due.low") <= 32 and max(order.index("due.normal"), 0) <= 8


def test_lane_buffers_ask_to_pause_a_full_lane_and_resume_at_half() -> None:
    buffers = LaneBuffers(LANE_OF, capacity=4)
    for i in range(4):
        buffers.add(FakeMessage("due.low", 1, i))  # type: ignore[arg-type]
    assert buffers.full_lanes() == frozenset({Priority.LOW})
    assert buffers.full_lanes() is None  # only changes are reported
    buffers.take()
    assert buffers.full_lanes() is None
    buffers.take()
    assert buffers.full_lanes() == frozenset()
    assert buffers.discard([("due.low", 1)]) == 2 and len(buffers) == 0


def test_settings_read_lists_and_maps_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKRON_NAMESPACE", "envns.")
    monkeypatch.setenv("KAFKRON_EXECUTOR_WORKER_ID", "executor-7")
    monkeypatch.setenv("KAFKRON_EXECUTOR_HANDLER_SPECS", '["a.b=services.executor.examples:noop"]')
    monkeypatch.setenv("KAFKRON_EXECUTOR_LANE_MAX_PASSES", '{"LOW": 5}')
    monkeypatch.setenv("KAFKRON_EXECUTOR_HTTP_ROUTES", '{"hooks.ping": "https://x.example/p"}')
    s = ExecutorSettings()
    assert s.group_id() == "envns.executor" and s.transactional_id() == "envns.executor.executor-7"
    assert s.handler_specs == ["a.b=services.executor.examples:noop"]
    assert s.lane_max_passes[Priority.LOW] == 5 and s.lane_max_passes[Priority.HIGH] == 2
    assert s.http_routes == {"hooks.ping": "https://x.example/p"}
    with pytest.raises(ValueError, match="lane_max_passes"):
        ExecutorSettings(lane_max_passes={Priority.LOW: 1})


def test_registry_from_settings_has_examples_specs_and_routes() -> None:
    from services.executor.handlers import HandlerKind
    from services.executor.service import build_registry

    registry = build_registry(
        ExecutorSettings(
            load_entry_points=False,
            handler_specs=["examples.noop=services.executor.examples:noop",
                           "custom.echo=services.executor.examples:echo"],
            http_routes={"hooks.ping": "https://hooks.example/ping"},
            allowed_http_hosts=["hooks.example"],
        )
    )  # fmt: skip
    assert registry.names() == ["custom.echo", "examples.noop", "hooks.ping"]
    assert registry.resolve("hooks.ping").kind is HandlerKind.HTTP
    assert ExecutorSettings(load_entry_points=False).handler_specs[0].startswith("examples.")
