"""One input record of the dag processor: decode it, route it, dead-letter what cannot be used.

``jobs``, ``job-results`` and ``dag-signals`` are co-partitioned and keyed by job id. A record
that does not decode, breaks a bound or whose key is not its job id goes to ``dlq`` as an
UNDECODABLE dead letter with its raw bytes and source position; processing goes on.
"""

from __future__ import annotations

from services.dag.edges import apply_edge, apply_job
from services.dag.runs import apply_upstream_ended, signal_upstream_end
from services.dag.scope import DagScope
from streams.codec import RecordKind
from streams.dead_letters import check_key, route_to_dlq, value_of
from streams.exceptions import DecodeError


def apply_input(
    scope: DagScope,
    topic: str,
    partition: int,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
) -> None:
    """Apply one record of ``jobs``, ``job-results`` or ``dag-signals``."""
    env = scope.env
    try:
        if key is None:
            raise DecodeError("record has no key; every kafkron input is keyed by job id")
        if topic == env.results_topic:
            result = env.result_reader.read(value_of(value))
            check_key(key, result.job_id)
            signal_upstream_end(scope, result)
        elif topic == env.signals_topic:
            signal = env.codec.decode(RecordKind.DAG_SIGNAL, value_of(value))
            check_key(key, signal["job_id"])
            if signal["kind"] == "UPSTREAM_ENDED":
                apply_upstream_ended(scope, signal)
            else:
                apply_edge(scope, signal)
        elif topic == env.jobs_topic:
            job = None if value is None else env.codec.decode(RecordKind.JOB, value)
            if job is not None:
                check_key(key, job["job_id"])
            apply_job(scope, key.decode(), value, job)
        else:
            raise DecodeError(f"the dag processor does not consume topic {topic}")
    except (DecodeError, UnicodeDecodeError) as exc:
        dead_letter(scope, str(exc), topic, partition, offset, key, value)


def dead_letter(
    scope: DagScope,
    reason: str,
    topic: str,
    partition: int,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
) -> None:
    """Emit an UNDECODABLE dead letter of the record; log it once (never its value), count it."""
    env = scope.env
    source = (topic, partition, offset, key, value)
    route_to_dlq(
        env.codec, scope.emit, env.dead_letters, env.dlq_topic, reason, source, scope.now_ms
    )
    scope.emitted += 1
