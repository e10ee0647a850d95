"""One input record of the timer: decode it, route it, and dead-letter what cannot be used.

``jobs``, ``job-results`` and ``retry`` are co-partitioned and keyed by job id. A record
that does not decode, whose key is not its job id, or whose schedule cannot be computed
goes to ``dlq`` as an UNDECODABLE dead letter with its raw bytes and source position, and
processing goes on with the next record.

A run of records sharing one scope goes through :func:`apply_input` each (a run of
``job-results`` through :func:`apply_results`), then :func:`finish_inputs` once;
:func:`handle_input` does both for one record.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.timer.commands import apply_job
from services.timer.releases import apply_release
from services.timer.results import apply_result
from services.timer.retention import write_retention
from services.timer.retries import accept_retry
from services.timer.scope import Scope
from streams.codec import RecordKind
from streams.dead_letters import check_key, route_to_dlq, value_of
from streams.exceptions import DecodeError, ScheduleError
from streams.processing import InputRecord


def handle_input(
    scope: Scope,
    topic: str,
    partition: int,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
) -> None:
    """Apply one record of an input topic; unusable records become dead letters."""
    apply_input(scope, topic, partition, offset, key, value)
    finish_inputs(scope)


def finish_inputs(scope: Scope) -> None:
    """End a run of :func:`apply_input` calls: write what the scope kept in memory for the
    run (the finished one-offs listed for retention) to its store transactions."""
    write_retention(scope)


def apply_input(
    scope: Scope,
    topic: str,
    partition: int,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
) -> None:
    """Apply one record of a run sharing ``scope``; call :func:`finish_inputs` after the run."""
    env = scope.env
    try:
        if key is None:
            raise DecodeError("record has no key; every kafkron input is keyed by job id")
        if topic == env.jobs_topic:
            job = None if value is None else env.decode_job(value)
            if job is not None:
                check_key(key, job["job_id"])
            apply_job(scope, key, value, job)
        elif topic == env.results_topic:
            result = env.read_result(value_of(value))
            check_key(key, result.job_id)
            apply_result(scope, key, result)
        elif topic == env.releases_topic:
            release = env.codec.decode(RecordKind.DAG_RELEASE, value_of(value))
            check_key(key, release["job_id"])
            apply_release(scope, release)
        elif topic == env.retry_topic:
            request = env.codec.decode(RecordKind.RETRY_REQUEST, value_of(value))
            check_key(key, request["due"]["job_id"])
            accept_retry(scope, request)
        else:
            raise DecodeError(f"the timer does not consume topic {topic}")
    except (DecodeError, ScheduleError) as exc:
        dead_letter(scope, str(exc), topic, partition, offset, key, value)


def apply_results(scope: Scope, partition: int, records: Sequence[InputRecord]) -> None:
    """Apply a run of ``job-results`` records sharing ``scope``: what :func:`apply_input`
    does with each, in one loop (a herd's results are the timer's busiest input)."""
    env = scope.env
    read = env.result_decoder()
    topic = env.results_topic
    for record in records:
        key, value = record.key(), record.value()
        if key is None or value is None:
            apply_input(scope, topic, partition, record.offset(), key, value)  # dead letter
            continue
        try:
            result = read(value)
            if key != result.job_id.encode():  # check_key's test inline: a call per result
                check_key(key, result.job_id)  # raises
            apply_result(scope, key, result)
        except (DecodeError, ScheduleError) as exc:
            dead_letter(scope, str(exc), topic, partition, record.offset(), key, value)


def dead_letter(
    scope: Scope,
    reason: str,
    topic: str,
    partition: int,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
) -> None:
    """Emit an UNDECODABLE dead letter carrying the raw record and where it came from; log
    it once (never its value) and count it."""
    env = scope.env
    source = (topic, partition, offset, key, value)
    route_to_dlq(
        env.codec, scope.emit_raw, env.dead_letters, env.dlq_topic, reason, source, scope.now_ms
    )
