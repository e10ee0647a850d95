"""The shared ExecutionResult probes cover what the encoder's and the reader's proofs need."""

from __future__ import annotations

import pytest

from streams.avro_binary import avro_long
from streams.codec import Codec, RecordKind
from streams.records import ExecutionStatus, Trigger
from streams.result_probes import result_probes

CODEC = Codec.from_directory()
LONGS = ("scheduled_for_ms", "started_at_ms", "finished_at_ms", "next_attempt_at_ms",
         "job_version", "recorded_at_ms")  # fmt: skip
OPTIONAL = ("reason", "error", "worker_id", "started_at_ms", "finished_at_ms",
            "next_attempt_at_ms")  # fmt: skip


@pytest.mark.parametrize("max_varint_bytes", [9, 10])
def test_every_status_and_trigger_once_and_every_union_branch(max_varint_bytes: int) -> None:
    probes = result_probes(max_varint_bytes)
    pairs = [(p["status"], p["trigger"]) for p in probes]
    assert sorted(pairs) == sorted((s.value, t.value) for s in ExecutionStatus for t in Trigger)
    for name in OPTIONAL:
        assert {p[name] is None for p in probes} == {True, False}, name
    for probe in probes:
        data = CODEC.encode(RecordKind.EXECUTION_RESULT, probe)
        assert CODEC.decode(RecordKind.EXECUTION_RESULT, data, check=False) == probe


@pytest.mark.parametrize(("max_varint_bytes", "bound"), [(9, 2**62), (10, 2**63)])
def test_the_widest_longs_fit_the_callers_varints_exactly(
    max_varint_bytes: int, bound: int
) -> None:
    values = [p[name] for p in result_probes(max_varint_bytes) for name in LONGS]
    longs = [v for v in values if v is not None]
    assert {bound - 1, -bound} <= set(longs)
    assert max(len(avro_long(v)) for v in longs) == max_varint_bytes
    assert all(-bound <= v < bound for v in longs)


def test_int_max_attempts_reach_the_largest_avro_int_only_when_asked() -> None:
    assert max(p["attempt"] for p in result_probes(9, int_max_attempts=True)) == 2**31 - 1
    assert max(p["attempt"] for p in result_probes(9)) < 2**31 - 100
