"""Creates on the API's event loop: one request or a batch, no thread per request.

Validation and encoding run inline; the only waits are awaited
futures: the status view catching up before a keyed create (coalesced across requests by
:class:`~services.ingest.catch_up.AsyncCatchUp`) and the delivery reports of the records
(many requests share the producer's batches). A create still answers only once its record
is durable (``acks=all``). Single creates that reach :meth:`AsyncCreates.create` in the same
loop turn run as one :meth:`AsyncCreates.create_many` (:mod:`services.ingest.create_batches`),
each with its own answer.

A create without job id or cron (a plain one-off, the bulk case) is validated and encoded
by :class:`~services.ingest.bulk.BulkJobBuilder` (~5 us instead of ~70 us through pydantic,
request hash and fastavro; it falls back to pydantic for anything unusual); with an
Idempotency-Key it also derives the job id and request hash there.

A create that may repeat (a key or an explicit job id) claims its job id in
:class:`~services.ingest.own_writes.OwnWrites` before awaiting anything: a concurrent
create of the same id in this process waits for the first and answers like it, or gets a
conflict at once for another body. Then it checks the view (caught up with the partition,
or sure that the records it has not read are this process's own) and writes.

A batch is a list of (request, idempotency key); each item gets its own outcome, a
:class:`SubmitReceipt` or the error that a single create would have raised, so one bad item
never loses or blocks the others. Items repeating an earlier item's key (or job id) in the
same batch answer like a repeated request: the first answer, or a conflict.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from services.ingest.bulk import BulkJobBuilder, fast_job_ids
from services.ingest.catch_up import AsyncCatchUp
from services.ingest.client import KafkronClient
from services.ingest.create_batches import CreateBatches, OnAnswer
from services.ingest.creates import (
    PlannedCreate,
    SubmitReceipt,
    answer_repeat,
    answer_repeat_of,
    answer_repeat_of_written,
    encode_create,
    plan_create,
)
from services.ingest.dag_admission import DagItem, refusals_async
from services.ingest.exceptions import (
    JobConflictError,
    JobRequestError,
    ViewNotReadyError,
)
from services.ingest.own_writes import Claim, OwnWrites
from services.ingest.producer import partition_for_key
from services.ingest.settings import IngestSettings
from services.ingest.validation import to_epoch_ms
from services.ingest.view import StatusView
from streams.codec import Codec, RecordKind
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
        self._own = OwnWrites(view.position)
        self._catch_up = AsyncCatchUp(view, self._own.covers)
        self._own.add_listener(self._catch_up.recheck)
        self._bulk = BulkJobBuilder(settings, codec)
        self._clock_us = clock_us
        self._batches = CreateBatches(self.create_many)

    async def create(self, request: Any, idempotency_key: str | None) -> SubmitReceipt:
        """One create, durable on return; raises what ``KafkronClient.submit`` raises.

        Creates that arrive in the same event-loop turn share one :meth:`create_many`
        (:mod:`services.ingest.create_batches`); each still gets its own answer.
        """
        outcome = await self._batches.create(request, idempotency_key)
        if isinstance(outcome, KafkronError):
            raise outcome
        return outcome

    async def create_many(
        self, items: Sequence[tuple[Any, str | None]], on_answer: OnAnswer | None = None
    ) -> list[Outcome]:
        """Every item's outcome, in order; all written records are durable on return.

        ``on_answer(index, outcome)`` hears each outcome as soon as it is final: all but
        the items waiting for another request's create of their job id right after the
        writes, those when that create settles.
        """
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
                    receipts[index] = SubmitReceipt(job_id, _SCHEDULED, _run_at_ms(request))
                    writes.append((index, job_id.encode(), value))
                else:
                    planned[index] = self._plan(request, key, now_us)
            except _ITEM_ERRORS as exc:
                outcomes[index] = exc
        claims, waits = self._claim(planned, outcomes)
        writers: dict[str, int] = {}  # job id -> index of the item that writes it
        try:
            await self._decide_and_write(
                items, planned, outcomes, claims, waits, writers, writes, receipts, now_us
            )
        finally:  # claims that wrote nothing (a repeat, an error), or an error in here
            for claim in claims.values():
                if not claim.settled.done():
                    stopped = claim.job_id in writers  # while writing (e.g. cancelled)
                    self._own.release(claim, _may_be_written() if stopped else None)
        answers: list[Outcome | None] = [None] * len(items)
        for index, (outcome, plan) in enumerate(zip(outcomes, planned, strict=True)):
            if index not in waits:
                answer = self._repeat_in_batch(outcome, plan, writers, planned, outcomes)
                answers[index] = answer
                if on_answer is not None:
                    on_answer(index, answer)
        for index, claim in waits.items():
            plan = planned[index]
            assert plan is not None
            answer = await self._repeat_of_claim(claim, plan, items[index])
            answers[index] = answer
            if on_answer is not None:
                on_answer(index, answer)
        return _all(answers)

    async def _decide_and_write(
        self,
        items: Sequence[tuple[Any, str | None]],
        planned: list[PlannedCreate | None],
        outcomes: list[Outcome | None],
        claims: dict[str, Claim],
        waits: dict[int, Claim],
        writers: dict[str, int],
        writes: list[tuple[int, bytes, bytes]],
        receipts: dict[int, SubmitReceipt],
        now_us: int,
    ) -> None:
        """Answer the items that repeat a job the view knows; write the others."""
        existing = await self._existing(claims, planned, outcomes)
        for index, plan in enumerate(planned):
            if plan is None or outcomes[index] is not None or index in waits:
                continue
            if plan.job_id in writers:
                continue
            claim = claims.get(plan.job_id)
            try:
                found = existing.get(plan.job_id)
                if found is not None:
                    if claim is not None:
                        claim.answer = partial(answer_repeat, found)
                    outcomes[index] = answer_repeat(found, plan)
                    continue
                value, receipts[index] = encode_create(plan, self._settings, self._codec, now_us)
                writes.append((index, plan.job_id.encode(), value))
                writers[plan.job_id] = index
                if claim is not None:  # from now on another body is a conflict at once
                    claim.answer = partial(
                        answer_repeat_of_written, plan.job_id, plan.idempotency_key,
                        plan.request_hash, receipts[index].next_run_at_ms,
                    )  # fmt: skip
            except _ITEM_ERRORS as exc:
                outcomes[index] = exc
        await self._refuse_unrunnable(items, writes, planned, claims, outcomes)
        if writes:
            await self._write(writes, planned, claims, receipts, outcomes)

    async def _refuse_unrunnable(
        self,
        items: Sequence[tuple[Any, str | None]],
        writes: list[tuple[int, bytes, bytes]],
        planned: list[PlannedCreate | None],
        claims: dict[str, Claim],
        outcomes: list[Outcome | None],
    ) -> None:
        """Take the DAG jobs nothing could run out of ``writes`` (their outcome: the 422, or
        a 503 when the view could not catch up to know their upstreams)."""
        upstreams = [_depends_on(items[index][0], planned[index]) for index, _, _ in writes]
        if not any(upstreams):  # the bulk case: a list comprehension, nothing looked up
            return
        dag_items = []
        for (index, _, value), depends_on in zip(writes, upstreams, strict=True):
            plan = planned[index]
            dag_items.append(DagItem(index, None if plan is None else plan.job_id, depends_on,
                                     value))  # fmt: skip
        dag_items.sort(key=lambda item: item.index)  # the bulk encoder's items come first
        refused = await refusals_async(dag_items, self._job_record, self._decode, self._caught_up)
        if not refused:
            return
        writes[:] = [write for write in writes if write[0] not in refused]
        for index, error in refused.items():
            outcomes[index] = error
            plan = planned[index]
            claim = None if plan is None else claims.get(plan.job_id)
            if claim is not None:  # its waiters create again themselves (and hear why)
                claim.answer = None
                self._own.release(claim, error)

    def _job_record(self, job_id: str) -> dict[str, Any] | None:
        """A job as the view knows it, else as this process created it a moment ago.

        The view first: a claim's record is a create, and a claim outlives the view reading
        it until the next prune, so a later cancel would hide behind it. Claims change only
        on this loop, so one the view has not read yet cannot vanish between the two reads.
        """
        found = self._view.job(job_id)
        if found is not None:
            return found
        claim = self._own.get(job_id)
        return None if claim is None or claim.record is None else self._decode(claim.record)

    def _decode(self, value: bytes) -> dict[str, Any]:
        return self._codec.decode(RecordKind.JOB, value)

    async def _caught_up(self, job_ids: Collection[str]) -> bool:
        """Wait until the view (or this process's own writes) covers these jobs' partitions."""
        count, topic = self._settings.kafka.partitions, self._view.jobs_topic
        partitions = {(topic, partition_for_key(j.encode(), count)) for j in job_ids}
        return await self._catch_up.caught_up(partitions, self._settings.view_catch_up_timeout_s)

    def _plan(self, request: Any, key: str | None, now_us: int) -> PlannedCreate:
        """A keyed plain one-off through the bulk encoder (no pydantic), else pydantic."""
        if key is not None and _bulk_shaped(request):
            fast = self._bulk.build_keyed(request, key, now_us)
            if fast is not None:
                job_id, value, hash_of_request = fast
                receipt = SubmitReceipt(job_id, _SCHEDULED, _run_at_ms(request))
                return PlannedCreate(None, job_id, hash_of_request, key, (value, receipt))
        return plan_create(request, key)

    def _claim(
        self, planned: list[PlannedCreate | None], outcomes: list[Outcome | None]
    ) -> tuple[dict[str, Claim], dict[int, Claim]]:
        """Claim the job ids that may repeat (no await in here): the claims of this call,
        and by item index the claims of other requests that those items must wait for."""
        mine: dict[str, Claim] = {}
        waits: dict[int, Claim] = {}
        for index, plan in enumerate(planned):
            if plan is None or outcomes[index] is not None or not plan.lookup:
                continue
            if plan.job_id in mine:
                continue  # a repeat within this call: answered like its first item
            claim = self._own.get(plan.job_id)
            if claim is None:
                mine[plan.job_id] = self._own.claim(plan.job_id)
            else:
                waits[index] = claim
        return mine, waits

    async def _write(
        self,
        writes: list[tuple[int, bytes, bytes]],
        planned: list[PlannedCreate | None],
        claims: dict[str, Claim],
        receipts: dict[int, SubmitReceipt],
        outcomes: list[Outcome | None],
    ) -> None:
        """Produce, wait until durable, and keep a claim on every written job until the view
        has read it (its offset is then known to be this process's own)."""
        group = await self._client.write_async([(key, value) for _, key, value in writes])
        where = {key: (partition, offset) for key, partition, offset in group.written}
        topic = group.topic
        written: list[tuple[Claim, tuple[str, int], int]] = []
        for index, job_key, value in writes:
            error = group.error_for(job_key)
            receipt = receipts[index]
            plan = planned[index]
            claim = claims.get(receipt.job_id) if plan is not None else None
            if claim is None and error is None and self._own.get(receipt.job_id) is None:
                claim = self._own.claim(receipt.job_id)  # a fresh id: nobody can wait on it
                key, hash_of_request = (
                    (None, None) if plan is None else (plan.idempotency_key, plan.request_hash)
                )
                claim.answer = partial(
                    answer_repeat_of_written, receipt.job_id, key, hash_of_request,
                    receipt.next_run_at_ms,
                )  # fmt: skip
            if error is None:
                outcomes[index] = receipt
                if claim is not None:
                    claim.record = value
                located = where.get(job_key)
                if claim is not None and located is not None:
                    written.append((claim, (topic, located[0]), located[1]))
                elif claim is not None:
                    self._own.release(claim)
            else:
                failure = outcomes[index] = _item_error(error)
                if claim is not None:
                    self._own.release(claim, failure)
        self._own.written(written)

    async def _repeat_of_claim(
        self, claim: Claim, plan: PlannedCreate, item: tuple[Any, str | None]
    ) -> Outcome:
        """The answer to a create whose job id another request of this process claimed."""
        if claim.answer is None:
            await asyncio.shield(claim.settled)
            if claim.answer is None:  # it wrote nothing and found nothing: try again
                (outcome,) = await self.create_many([item])
                return outcome
        try:
            receipt = claim.answer(plan)  # another body: a conflict, even while in flight
        except JobConflictError as exc:
            return exc
        error = await asyncio.shield(claim.settled)
        return receipt if error is None else error

    async def _existing(
        self,
        claims: dict[str, Claim],
        planned: list[PlannedCreate | None],
        outcomes: list[Outcome | None],
    ) -> dict[str, dict[str, Any]]:
        """The current state of every claimed job id (a keyed item or an explicit id).

        A job the view does not know may be brand new: the view first catches up with its
        partition (one coalesced ListOffsets for the whole batch), or the records it has not
        read yet are all this process's own. When that fails, the items that needed it get
        the error; the others go on.
        """
        existing: dict[str, dict[str, Any]] = {}
        missing: list[str] = []
        for job_id in claims:
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


def _depends_on(request: Any, plan: PlannedCreate | None) -> Sequence[str]:
    """The validated ``depends_on`` of an item about to be written (empty when none)."""
    if plan is not None and plan.create is not None:
        return plan.create.depends_on or ()
    found = request.get("depends_on") if type(request) is dict else None
    return found or ()


def _all(answers: list[Outcome | None]) -> list[Outcome]:
    assert all(answer is not None for answer in answers)
    return answers  # type: ignore[return-value]


def _bulk_shaped(request: Any) -> bool:
    """A create the bulk encoder takes: a plain dict with a random id and no cron.

    Its job id is fresh, so it can repeat nothing: no lookup, no request hash. Cron jobs
    take the pydantic path because their answer needs the first tick.
    """
    return type(request) is dict and request.get("job_id") is None and "cron" not in request


def _run_at_ms(request: dict[str, Any]) -> int | None:
    run_at = request.get("run_at")
    return None if run_at is None else int(to_epoch_ms(run_at))


def _may_be_written() -> KafkronError:
    """What waiters on a claim answer when its create stopped while writing."""
    return KafkaDeliveryError(
        "the first create with this key stopped before its write was acknowledged; it may "
        "be written: repeat the request",
        retryable=True,
        retry_after_s=1.0,
    )


def _item_error(error: BaseException) -> KafkronError:
    if isinstance(error, KafkronError):
        return error
    raise error
