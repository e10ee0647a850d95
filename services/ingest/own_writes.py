"""The creates this API process claimed or wrote, until its status view has read them.

Two uses, both on the event loop:

* **Claims.** A create that may repeat an earlier one (an Idempotency-Key or an explicit job
  id) first claims its job id here, before anything is awaited. A concurrent create of the
  same job id in this process finds the claim: with another request body it is a conflict
  at once (also while the first is still being written); with the same body it waits for
  the first and answers like it. Every record this process writes to ``jobs`` keeps a claim
  until the view has applied it, so a repeat in that window is answered from memory.
* **Coverage.** Before it writes, a keyed create must know that no *other* process (or an
  earlier run of this one) wrote its job: the view must have read the job's partition up to
  its end as of now (:mod:`services.ingest.catch_up`). The records between the view's
  position and that end are very often only this process's own, whose job ids are claimed
  here: :meth:`OwnWrites.covers` says so, and the create need not wait for the view to read
  them. Any offset this process did not write (another API process, the timer, a command
  written by the blocking client, a transaction marker) makes it wait for the view.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Mapping

from services.ingest.creates import PlannedCreate, SubmitReceipt
from streams.exceptions import KafkronError

TopicPartitionKey = tuple[str, int]
# Answers a repeat of the first create (raises JobConflictError for another body).
RepeatAnswer = Callable[[PlannedCreate], SubmitReceipt]


class Claim:
    """One job id this process is creating or created.

    ``answer`` is set once this claim's create is known to be the job's first (it writes
    it, or found it already written); ``settled`` resolves when that outcome is final:
    None, or the error that the first create got (its record is not known to be written).
    """

    __slots__ = ("answer", "job_id", "offset", "record", "settled")

    def __init__(self, job_id: str, settled: asyncio.Future[KafkronError | None]) -> None:
        self.job_id = job_id
        self.answer: RepeatAnswer | None = None
        self.settled = settled
        self.offset: tuple[TopicPartitionKey, int] | None = None
        # The encoded Job once durable: a dependent created before the view reads it
        # finds its upstream here (services.ingest.dag_admission).
        self.record: bytes | None = None


class OwnWrites:
    """Claims by job id and this process's offsets on ``jobs`` the view has not read yet."""

    def __init__(self, position: Callable[[TopicPartitionKey], int]) -> None:
        self._position = position  # the view's next offset to apply
        self._loop = asyncio.get_running_loop()
        self._claims: dict[str, Claim] = {}
        self._offsets: dict[TopicPartitionKey, list[int]] = {}
        self._owners: dict[TopicPartitionKey, dict[int, Claim]] = {}
        self._listeners: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self._claims)

    def get(self, job_id: str) -> Claim | None:
        """The claim on ``job_id``, or None."""
        return self._claims.get(job_id)

    def claim(self, job_id: str) -> Claim:
        """Claim an unclaimed job id (check with :meth:`get` first, without awaiting)."""
        assert job_id not in self._claims
        claim = Claim(job_id, self._loop.create_future())
        self._claims[job_id] = claim
        return claim

    def release(self, claim: Claim, error: KafkronError | None = None) -> None:
        """Drop a claim that wrote nothing (it repeated a job the view knows, or failed);
        its waiters see ``error``, or try again themselves when it never had an answer."""
        if self._claims.get(claim.job_id) is claim:
            del self._claims[claim.job_id]
        if not claim.settled.done():
            claim.settled.set_result(error)

    def written(self, claims: Iterable[tuple[Claim, TopicPartitionKey, int]]) -> None:
        """Claims whose records are durable at these offsets: kept until the view read them."""
        touched: set[TopicPartitionKey] = set()
        for claim, tp, offset in claims:
            claim.offset = (tp, offset)
            offsets = self._offsets.setdefault(tp, [])
            if not offsets or offsets[-1] < offset:
                offsets.append(offset)
            else:
                insort(offsets, offset)
            self._owners.setdefault(tp, {})[offset] = claim
            touched.add(tp)
            if not claim.settled.done():
                claim.settled.set_result(None)
        for tp in touched:
            self._prune(tp)
        for listener in self._listeners:
            listener()

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (on the loop) after new own offsets are known."""
        self._listeners.append(listener)

    def covers(self, targets: Mapping[TopicPartitionKey, int]) -> bool:
        """True when every record the view has not applied below each target offset is one
        this process wrote (so its job id is claimed here)."""
        for tp, end in targets.items():
            offsets = self._prune(tp)
            start = self._position(tp)  # after the prune: it may have moved on meanwhile
            if start >= end:
                continue
            if offsets is None or bisect_left(offsets, end) - bisect_left(offsets, start) != (
                end - start
            ):
                return False
        return True

    def _prune(self, tp: TopicPartitionKey) -> list[int] | None:
        """Forget offsets (and their claims) the view has applied; the view answers now."""
        offsets = self._offsets.get(tp)
        if offsets is None:
            return None
        applied = bisect_left(offsets, self._position(tp))
        if applied:
            owners = self._owners[tp]
            for offset in offsets[:applied]:
                claim = owners.pop(offset)
                if self._claims.get(claim.job_id) is claim:
                    del self._claims[claim.job_id]
            del offsets[:applied]
        return offsets
