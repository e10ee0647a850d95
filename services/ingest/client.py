"""The kafkron client library: create jobs and command existing ones, from any service.

``KafkronClient`` validates each request like the REST API does, writes the Job state record
to ``jobs`` and returns only once it is durable (idempotent producer, ``acks=all``).

Where the current state of a job comes from (needed to cancel, pause, resume or trigger it,
and to answer a repeated create): a :class:`JobStateLookup`. The REST API passes its own
:class:`~services.ingest.view.StatusView`. A client built without one opens a private
StatusView on ``settings.view_path`` the first time it needs state (never for a create
without idempotency key, job id or ``depends_on``, nor for a ``submit_many`` without
``depends_on``); it catches up from its stored offsets, so keep that directory across
restarts. A job with ``depends_on`` is refused (``JobRequestError`` at ``depends_on``) when
nothing could run it: see :mod:`services.ingest.dag_admission`. Before reading, a command
waits until the view has applied everything committed to the job's partitions at that
moment.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from services.ingest.async_delivery import DeliveryGroup
from services.ingest.backfill import BackfillPlan, BackfillRequest, plan_backfill
from services.ingest.bulk import BulkJobBuilder
from services.ingest.commands import (
    JobRecord,
    backfill_record,
    cancel_record,
    pause_record,
    resume_record,
    trigger_record,
)
from services.ingest.creates import (
    JobRequest,
    SubmitReceipt,
    answer_repeat,
    encode_create,
    plan_create,
)
from services.ingest.dag_admission import DagItem, refusals
from services.ingest.exceptions import (
    JobConflictError,
    JobNotFoundError,
    JobRequestError,
    ViewNotReadyError,
)
from services.ingest.producer import CommandProducer, Delivered, partition_for_key
from services.ingest.settings import IngestSettings
from services.ingest.validation import JobCreate
from streams.codec import Codec, RecordKind
from streams.records import JobStatus
from streams.topics import TopicNames

if TYPE_CHECKING:
    from services.ingest.view import StatusView


class JobStateLookup(Protocol):
    """Current job state as a status view knows it."""

    def job(self, job_id: str) -> dict[str, Any] | None: ...

    def running(self, job_id: str) -> dict[str, int]: ...

    def wait_until_caught_up(
        self, timeout_s: float, partitions: Collection[tuple[str, int]] | None = None
    ) -> bool: ...


@dataclass(frozen=True, slots=True)
class CommandReceipt:
    """The answer to a command: ``changed`` is False when the job was already in that state."""

    job_id: str
    status: str
    changed: bool
    manual_fire_at_ms: int | None = None


def _now_us() -> int:
    return time.time_ns() // 1000


def _depends_on(job: JobRequest) -> Sequence[str]:
    """The ``depends_on`` of a validated request (empty when it has none)."""
    found = job.depends_on if isinstance(job, JobCreate) else job.get("depends_on")
    return found or ()


class KafkronClient:
    """Creates and commands jobs; thread-safe; ``close()`` it when done."""

    def __init__(
        self,
        settings: IngestSettings,
        *,
        lookup: JobStateLookup | None = None,
        codec: Codec | None = None,
        clock_us: Callable[[], int] = _now_us,
    ) -> None:
        self._settings = settings
        self._codec = codec or Codec.from_directory()
        self._names = TopicNames(settings.kafka.namespace)
        self._lookup = lookup
        self._owned_view: StatusView | None = None
        self._state_lock = threading.Lock()
        self._written: dict[tuple[str, int], int] = {}
        self._clock_us = clock_us
        self._bulk = BulkJobBuilder(settings, self._codec)
        self._producer = CommandProducer(
            settings.kafka, delivery_timeout_s=settings.delivery_timeout_s
        )

    @property
    def healthy(self) -> bool:
        """False after a fatal producer error."""
        return self._producer.healthy

    def close(self) -> None:
        """Deliver pending records and release the producer (and a private view)."""
        try:
            self._producer.close()
        finally:
            if self._owned_view is not None:
                self._owned_view.close()
                self._owned_view = None

    def __enter__(self) -> KafkronClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # creates -----------------------------------------------------------------------------

    def submit(self, job: JobRequest, *, idempotency_key: str | None = None) -> SubmitReceipt:
        """Create one job; durable on return.

        With ``idempotency_key`` (or an explicit ``job_id``) a repeat of the same request
        returns the first answer with ``created=False``; the same key or job id with another
        request raises ``JobConflictError``. Raises ``JobRequestError`` naming bad fields.
        """
        planned = plan_create(job, idempotency_key)
        if planned.lookup:
            existing = self._find(planned.job_id, results=False)
            if existing is not None:
                return answer_repeat(existing, planned)
        value, receipt = encode_create(planned, self._settings, self._codec, self._clock_us())
        assert planned.create is not None
        if planned.create.depends_on:
            item = DagItem(0, planned.job_id, planned.create.depends_on, value)
            refused = self._refusals([item])
            if refused:
                raise refused[0]
        self._remember(self._producer.send(self._names.jobs, planned.job_id.encode(), value))
        return receipt

    def submit_many(self, jobs: Sequence[JobRequest]) -> list[str]:
        """Create many jobs with one produce pass and one wait; returns their job ids.

        All requests are validated before anything is written, so a bad one (its index is
        the first element of each error's ``loc``) writes nothing. No idempotency keys and
        no existence checks: an explicit ``job_id`` that exists is replaced by a newer
        version (SCHEDULED again, even if it was cancelled), so re-running a load with the
        same ids converges to the same jobs. Plain dict requests of a repeated shape take a
        fast path without pydantic (see ``services.ingest.bulk``). At most
        ``settings.max_jobs_per_batch`` jobs per call.
        """
        limit = self._settings.max_jobs_per_batch
        if len(jobs) > limit:
            raise JobRequestError.at(
                [],
                f"{len(jobs)} jobs in one batch, at most {limit} allowed; split it",
                len(jobs),
                "too_long",
            )
        now_us = self._clock_us()
        # The loop allocates two objects per job that all stay alive, so the cyclic GC would
        # run full collections over them again and again (~10% of the time): pause it.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            ids, encoded, errors = self._bulk.build_all(jobs, now_us)
        finally:
            if gc_was_enabled:
                gc.enable()
        if errors:
            raise JobRequestError(errors)
        upstreams = [_depends_on(job) for job in jobs]
        if any(upstreams):  # the plain bulk load: one pass, no lookup
            triples = zip(ids, upstreams, encoded, strict=True)
            items = [DagItem(i, j, deps, value) for i, (j, deps, (_, value)) in enumerate(triples)]
            refused = self._refusals(items)
            if refused:
                raise JobRequestError(
                    [{**e, "loc": [i, *e["loc"]]} for i, error in sorted(refused.items())
                     for e in error.errors]
                )  # fmt: skip
        self._remember(self._producer.send_bulk(self._names.jobs, encoded))
        return ids

    def _refusals(self, items: Sequence[DagItem]) -> dict[int, JobRequestError]:
        """The DAG jobs among ``items`` nothing could run (see ``dag_admission``)."""
        state = self._state()

        def decode(value: bytes) -> dict[str, Any]:
            return self._codec.decode(RecordKind.JOB, value)

        def catch_up(job_ids: Collection[str]) -> None:
            partitions = {tp for j in job_ids for tp in self._partitions_of(j, results=False)}
            timeout_s = self._settings.view_catch_up_timeout_s
            if not state.wait_until_caught_up(timeout_s, partitions):
                raise ViewNotReadyError(
                    f"the status view did not read the jobs named in depends_on within "
                    f"{timeout_s:g}s; retry shortly",
                    retry_after_s=1.0,
                )

        return refusals(items, state.job, decode, catch_up)

    # commands on existing jobs -----------------------------------------------------------

    def cancel(self, job_id: str) -> CommandReceipt:
        """Cancel the job (SCHEDULED or PAUSED -> CANCELLED); a repeat answers unchanged.

        Raises ``JobConflictError`` while an execution runs or when the job completed.
        """
        current = self._current(job_id, results=True)
        if current["status"] == JobStatus.CANCELLED:
            return CommandReceipt(job_id, JobStatus.CANCELLED.value, changed=False)
        running = self._state().running(job_id)
        if running:
            raise JobConflictError(
                job_id,
                f"job {job_id} has a RUNNING execution ({', '.join(sorted(running))}); it "
                "cannot be cancelled mid-flight: retry after it finishes, or pause the job",
            )
        return self._apply(current, cancel_record)

    def pause(self, job_id: str) -> CommandReceipt:
        """Stop firing the job until ``resume``; a repeat answers unchanged."""
        return self._apply(self._current(job_id, results=False), pause_record)

    def resume(self, job_id: str) -> CommandReceipt:
        """Fire a paused job again from its next tick; a repeat answers unchanged."""
        return self._apply(self._current(job_id, results=False), resume_record)

    def trigger_now(self, job_id: str) -> CommandReceipt:
        """Fire the job once more now (``scheduled_for`` = now), besides its schedule."""
        return self._apply(self._current(job_id, results=False), trigger_record)

    def backfill(self, job_id: str, request: BackfillRequest) -> BackfillPlan:
        """Run a recurring job's ticks in [from, to] now (trigger BACKFILL, at most
        ``rate`` a second, each with its own execution id, so a repeat runs nothing twice);
        a dry run only counts and lists them.

        Build the request with ``services.ingest.backfill.parse_backfill({"from": ...,
        "to": ..., "rate": ..., "dry_run": ...})``. Raises ``JobRequestError`` at ``job_id``
        (not recurring) or ``to`` (before from, or a window of more than
        ``settings.max_backfill_ticks`` ticks), ``JobConflictError`` for a cancelled job.
        """
        current = self._current(job_id, results=False)
        plan = plan_backfill(current, request, self._settings.max_backfill_ticks)
        if request.dry_run:
            return plan
        record = backfill_record(current, plan.from_ms, plan.to_ms, plan.per_s, self._clock_us())
        self._write(job_id, record)
        return replace(plan, written=True)

    def _apply(
        self,
        current: Mapping[str, Any],
        build: Callable[[Mapping[str, Any], int], JobRecord | None],
    ) -> CommandReceipt:
        record = build(current, self._clock_us())
        if record is None:
            return CommandReceipt(current["job_id"], current["status"], changed=False)
        self._write(record["job_id"], record)
        return CommandReceipt(
            record["job_id"], record["status"], True, record.get("manual_fire_at_ms")
        )

    # state and writes --------------------------------------------------------------------

    def _write(self, job_id: str, record: JobRecord) -> Delivered:
        value = self._codec.encode(RecordKind.JOB, record)
        delivered = self._producer.send(self._names.jobs, job_id.encode(), value)
        self._remember(delivered)
        return delivered

    async def write_async(self, records: Sequence[tuple[bytes, bytes]]) -> DeliveryGroup:
        """Produce encoded Job records (key, value) to ``jobs`` from an event loop; returns
        once each is durable or failed (``error_for(key)`` of the returned group says).

        No thread waits: the deliveries of many concurrent writes share the producer's
        batches. Read-your-writes offsets are remembered.
        """
        group = self._producer.produce_group(self._names.jobs, records)
        self._remember(await self._producer.wait_group(group))
        return group

    def _remember(self, delivered: Delivered) -> None:
        with self._state_lock:
            for tp, offset in delivered.next_offsets().items():
                if offset > self._written.get(tp, 0):
                    self._written[tp] = offset

    def written_through(self, job_id: str) -> dict[tuple[str, int], int]:
        """How far a reader of the job's ``jobs`` partition must be to see this client's
        writes (read-your-writes: pass it to ``StatusView.wait_for_offsets``)."""
        (tp,) = self._partitions_of(job_id, results=False)
        with self._state_lock:
            offset = self._written.get(tp)
        return {} if offset is None else {tp: offset}

    def _state(self) -> JobStateLookup:
        with self._state_lock:
            if self._lookup is None:
                from services.ingest.view import StatusView  # only when used without the API

                view = StatusView(self._settings, self._codec).start()
                self._owned_view = self._lookup = view
            return self._lookup

    def _partitions_of(self, job_id: str, results: bool) -> list[tuple[str, int]]:
        partition = partition_for_key(job_id.encode(), self._settings.kafka.partitions)
        topics = [self._names.jobs, self._names.job_results] if results else [self._names.jobs]
        return [(topic, partition) for topic in topics]

    def _catch_up(self, job_id: str, results: bool) -> None:
        lookup = self._state()
        timeout_s = self._settings.view_catch_up_timeout_s
        if not lookup.wait_until_caught_up(timeout_s, self._partitions_of(job_id, results)):
            raise ViewNotReadyError(
                f"the status view did not read the latest state of job {job_id} within "
                f"{timeout_s:g}s; retry shortly",
                retry_after_s=1.0,
            )

    def _find(self, job_id: str, *, results: bool) -> dict[str, Any] | None:
        """The job's state; on a miss, catch up its partition first (it may be brand new)."""
        found = self._state().job(job_id)
        if found is None:
            self._catch_up(job_id, results)
            found = self._state().job(job_id)
        return found

    def _current(self, job_id: str, *, results: bool) -> dict[str, Any]:
        """The job's state as of now (the view caught up with its partitions first)."""
        self._catch_up(job_id, results)
        found = self._state().job(job_id)
        if found is None:
            raise JobNotFoundError(job_id)
        return found
