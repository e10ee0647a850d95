"""Creates on the API's event loop: one request or a batch, no thread per request.

Validation and encoding run inline; the only waits are awaited
futures: the status view catching up before a keyed create (coalesced across requests by
:class:`~services.ingest.catch_up.AsyncCatchUp`) and the delivery reports of the records
(many requests share the producer's batches). A create still answers only once its record
is durable (``acks=all``).

A create without key, job id or cron (a plain one-off, the bulk case) is validated and
encoded by :class:`~services.ingest.bulk.BulkJobBuilder` (~5 us instead of ~70 us through
pydantic, request hash and fastavro; it falls back to pydantic for anything unusual).

A batch is a list of (request, idempotency key); each item gets its own outcome, a
:class:`SubmitReceipt` or the error that a single create would have raised, so one bad item
never loses or blocks the others. Items repeating an earlier item's key (or job id) in the
same batch answer like a repeated request: the first answer, or a conflict.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from services.ingest.bulk import BulkJobBuilder, fast_job_ids
from services.ingest.catch_up import AsyncCatchUp
from services.ingest.client import KafkronClient
from services.ingest.creates import (
    PlannedCreate,
    SubmitReceipt,
    answer_repeat,
    answer_repeat_of,
    encode_create,
    plan_create,
)
from services.ingest.exceptions import (
    JobConflictError,
    JobRequestError,
    ViewNotReadyError,
)
from services.ingest.producer import partition_for_key
from services.ingest.settings import IngestSettings
from services.ingest.validation import to_epoch_ms
from services.ingest.view import StatusView
from streams.codec import Codec
from streams.exceptions import KafkaDeliveryError, KafkronError
from streams.records import JobStatus

Outcome = SubmitReceipt | KafkronError
# What a single create can answer besides a receipt; anything else is a server error.
_ITEM_ERRORS = (JobRequestError, JobConflictError, ViewNotReadyError, KafkaDeliveryError)
_SCHEDULED = JobStatus.SCHEDULED.value


def _now_us() -> int:
    return time.time_ns() // 1000


class AsyncCreates:
    """Creates jobs for the API through ``client``'s producer and ``view``'s state."""

    def __init__(
        self,
        client: KafkronClient,
        view: StatusView,
        settings: IngestSettings,
        codec: Codec,
        *,
        clock_us: Callable[[], int] = _now_us,
    ) -> None:
        self._client, self._view = client, view
        self._settings, self._codec = settings, codec
        self._catch_up = AsyncCatchUp(view)
        self._bulk = BulkJobBuilder(settings, codec)
        self._clock_us = clock_us

    async def create(self, request: Any, idempotency_key: str | None) -> SubmitReceipt:
        """One create, durable on return; raises what ``KafkronClient.submit`` raises."""
        (outcome,) = await self.create_many([(request, idempotency_key)])
        if isinstance(outcome, KafkronError):
            raise outcome
        return outcome

    async def create_many(self, items: Sequence[tuple[Any, str | None]]) -> list[Outcome]:
        """Every item's outcome, in order; all written records are durable on return."""
        outcomes: list[Outcome | None] = [None] * len(items)
        planned: list[PlannedCreate | None] = [None] * len(items)
        writes: list[tuple[int, bytes, bytes]] = []  # (index, key, value)
        receipts: dict[int, SubmitReceipt] = {}
        now_us = self._clock_us()
        fresh_ids = fast_job_ids(len(items))
        for index, (request, key) in enumerate(items):
            try:
                if key is None and _bulk_shaped(request):
                    job_id, value = self._bulk.build(request, next(fresh_ids), now_us)
                    run_at = request.get("run_at")
                    next_run = None if run_at is None else to_epoch_ms(run_at)
                    receipts[index] = SubmitReceipt(job_id, _SCHEDULED, next_run)
                    writes.append((index, job_id.encode(), value))
                else:
                    planned[index] = plan_create(request, key)
            except _ITEM_ERRORS as exc:
                outcomes[index] = exc
        existing = await self._existing(planned, outcomes)
        writers: dict[str, int] = {}  # job id -> index of the item that writes it
        for index, plan in enumerate(planned):
            if plan is None or outcomes[index] is not None or plan.job_id in writers:
                continue
            try:
                found = existing.get(plan.job_id)
                if found is not None:
                    outcomes[index] = answer_repeat(found, plan)
                    continue
                value, receipts[index] = encode_create(plan, self._settings, self._codec, now_us)
                writes.append((index, plan.job_id.encode(), value))
                writers[plan.job_id] = index
            except _ITEM_ERRORS as exc:
                outcomes[index] = exc
        if writes:
            group = await self._client.write_async([(key, value) for _, key, value in writes])
            for index, job_key, _ in writes:
                error = group.error_for(job_key)
                outcomes[index] = receipts[index] if error is None else _item_error(error)
        return [
            self._repeat_in_batch(outcome, plan, writers, planned, outcomes)
            for outcome, plan in zip(outcomes, planned, strict=True)
        ]

    async def _existing(
        self, planned: list[PlannedCreate | None], outcomes: list[Outcome | None]
    ) -> dict[str, dict[str, Any]]:
        """The current state of every job a keyed item (or explicit id) may repeat.

        A job the view does not know may be brand new: the view first catches up with its
        partition (one coalesced ListOffsets for the whole batch). When that fails, the
        items that needed it get the error; the others go on.
        """
        lookups = {p.job_id for p in planned if p is not None and p.lookup}
        existing: dict[str, dict[str, Any]] = {}
        missing: list[str] = []
        for job_id in lookups:
            found = self._view.job(job_id)
            if found is None:
                missing.append(job_id)
            else:
                existing[job_id] = found
        if not missing:
            return existing
        count, topic = self._settings.kafka.partitions, self._view.jobs_topic
        if len(missing) < count:
            partitions = {(topic, partition_for_key(j.encode(), count)) for j in missing}
        else:  # as cheap to ask for all (one request) as to hash every id (8 us each)
            partitions = {(topic, p) for p in range(count)}
        timeout_s = self._settings.view_catch_up_timeout_s
        try:
            if not await self._catch_up.caught_up(partitions, timeout_s):
                raise ViewNotReadyError(
                    f"the status view did not read the latest state of the jobs topic within "
                    f"{timeout_s:g}s; retry shortly",
                    retry_after_s=1.0,
                )
        except ViewNotReadyError as exc:
            unknown = set(missing)
            for index, plan in enumerate(planned):
                if plan is not None and plan.job_id in unknown and outcomes[index] is None:
                    outcomes[index] = exc
            return existing
        for job_id in missing:
            found = self._view.job(job_id)
            if found is not None:
                existing[job_id] = found
        return existing

    @staticmethod
    def _repeat_in_batch(
        outcome: Outcome | None,
        plan: PlannedCreate | None,
        writers: dict[str, int],
        planned: list[PlannedCreate | None],
        outcomes: list[Outcome | None],
    ) -> Outcome:
        """A later item with the job id an earlier item wrote: answered like a repeat."""
        if outcome is not None:
            return outcome
        assert plan is not None
        first_index = writers[plan.job_id]
        first, first_plan = outcomes[first_index], planned[first_index]
        assert first is not None and first_plan is not None
        if isinstance(first, KafkronError):
            return first  # not known to be written: the same error, retry both
        try:
            return replace(answer_repeat_of(first_plan, first, plan), created=False)
        except JobConflictError as exc:
            return exc


def _bulk_shaped(request: Any) -> bool:
    """A create the bulk encoder takes: a plain dict with a random id and no cron.

    Its job id is fresh, so it can repeat nothing: no lookup, no request hash. Cron jobs
    take the pydantic path because their answer needs the first tick.
    """
    return type(request) is dict and request.get("job_id") is None and "cron" not in request


def _item_error(error: BaseException) -> KafkronError:
    if isinstance(error, KafkronError):
        return error
    raise error
