"""faust codecs for kafkron's topics: a faust agent reads ``job-results`` and writes ``jobs``.

Two lines of setup in a faust app::

    from services.faust_codecs import kafkron_topics
    results, jobs = kafkron_topics(app)  # namespace "kafkron." unless given

``results`` yields :class:`~streams.records.ExecutionResult` models; send a
:func:`job_command` to ``jobs`` (key: its ``job_id``) to create or replace a job. faust's
producer (aiokafka) partitions keys with murmur2 like Java's, so its records land where
kafkron's own do.

This module imports only the codec, the record models and the topic names, never the
scheduling code: faust-streaming's dependency mode-streaming requires croniter < 6, and
kafkron's scheduling code needs croniter >= 6, so a faust agent runs in an environment of
its own (README, "faust agents"). A command written here skips what the API checks before it
writes (idempotency keys, the DAG checks, the cron expression): the timer dead-letters a job
it cannot schedule, with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from faust.serializers import codecs as faust_codecs

from streams.codec import Codec, RecordKind
from streams.records import MODEL_BY_KIND, AvroRecord, ExecutionResult, Job
from streams.topics import TopicNames

RESULT_CODEC = "kafkron.execution_result"
JOB_CODEC = "kafkron.job"


class KafkronRecordCodec(faust_codecs.Codec):  # type: ignore[misc]
    """One kind of kafkron record <-> its single-object-encoded bytes, as a faust codec.

    Loads give the kind's pydantic model (``ExecutionResult``, ``Job``, ...); dumps take a
    model or the dict ``Codec.encode`` takes.
    """

    def __init__(self, kind: RecordKind, codec: Codec | None = None) -> None:
        super().__init__(kind=kind.value)
        self.record_kind = kind
        self.codec = codec or Codec.from_directory()

    def _dumps(self, obj: Any) -> bytes:
        record = obj.to_avro() if isinstance(obj, AvroRecord) else obj
        return self.codec.encode(self.record_kind, record)

    def _loads(self, s: bytes) -> AvroRecord:
        return MODEL_BY_KIND[self.record_kind].from_avro(self.codec.decode(self.record_kind, s))


def register_codecs(codec: Codec | None = None) -> None:
    """Register the result and job codecs with faust under ``RESULT_CODEC`` and ``JOB_CODEC``."""
    shared = codec or Codec.from_directory()
    faust_codecs.register(RESULT_CODEC, KafkronRecordCodec(RecordKind.EXECUTION_RESULT, shared))
    faust_codecs.register(JOB_CODEC, KafkronRecordCodec(RecordKind.JOB, shared))


def kafkron_topics(app: Any, namespace: str = "kafkron.") -> tuple[Any, Any]:
    """``(job-results, jobs)`` topics of ``app`` with kafkron's codecs, keys as UTF-8 text.

    faust never creates or changes them (``internal=False``): kafkron's ``topics create`` does.
    """
    register_codecs()
    names = TopicNames(namespace)
    results = app.topic(
        names.job_results, key_type=str, key_serializer="raw", value_serializer=RESULT_CODEC
    )
    jobs = app.topic(names.jobs, key_type=str, key_serializer="raw", value_serializer=JOB_CODEC)
    return results, jobs


def job_command(job_id: str, handler: str, **fields: Any) -> Job:
    """A create-or-replace command for ``jobs``: the full Job state at a fresh version.

    ``fields`` are the Job record's (``run_at_ms``, ``cron={"expression": ..., "timezone":
    ...}``, ``payload`` bytes, ``priority``, ``tenant``, ``labels``, ...); the rest take the
    schema's defaults. Exactly one of ``run_at_ms``, ``cron`` and ``depends_on`` must be set.
    """
    now_us = time.time_ns() // 1000
    stamps: Mapping[str, int] = {
        "version": now_us,
        "created_at_ms": now_us // 1000,
        "updated_at_ms": now_us // 1000,
    }
    return Job.model_validate({"job_id": job_id, "handler": handler, **stamps, **fields})


__all__ = [
    "JOB_CODEC",
    "RESULT_CODEC",
    "ExecutionResult",
    "Job",
    "KafkronRecordCodec",
    "job_command",
    "kafkron_topics",
    "register_codecs",
]
