"""The DAG checks on the create paths: which jobs they see, and one catch-up on a miss.

Every create path (``POST /api/jobs`` and its batch through
:class:`~services.ingest.async_creates.AsyncCreates`, ``KafkronClient.submit`` and
``submit_many``) runs the creates it is about to write through :func:`refusals` (blocking)
or :func:`refusals_async`, with the same rules (:mod:`services.ingest.dag_checks`):

* A job written earlier in the same batch or call counts as known (an upstream before its
  dependents); one refused there does not. Later items never count: the order is the
  order of creation.
* Other jobs come from the caller's ``lookup``: the API's own writes its view has not read
  yet, then the status view.
* An upstream nobody knows may be brand new: the view catches up with the ``jobs``
  partitions of every id missed (one wait for the whole batch), then the batch is checked
  again, and only then refused.
* Edges stay inside a tenant: a job of another tenant than the dependent's counts as one
  that does not exist (the same refusal, so a tenant learns nothing of another's jobs).

Only items with ``depends_on`` cost anything: a batch without one is not looked at.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.ingest.dag_checks import DagNode, check_upstreams, node_of
from services.ingest.exceptions import IngestError, JobRequestError, ViewNotReadyError

RecordLookup = Callable[[str], Mapping[str, Any] | None]


@dataclass(frozen=True, slots=True)
class DagItem:
    """A create about to be written: ``job_id`` None for a fresh random id (nobody can name
    it), ``depends_on`` empty for a job with a schedule, ``value`` its encoded Job."""

    index: int
    job_id: str | None
    depends_on: Sequence[str]
    value: bytes


def _check(
    items: Sequence[DagItem], lookup: RecordLookup, decode: Callable[[bytes], Mapping[str, Any]]
) -> tuple[dict[int, JobRequestError], dict[int, list[str]]]:
    """Each item's refusal (by index) in order, and by index the ids no lookup knew."""
    earlier: dict[str, bytes] = {}
    refused: dict[int, JobRequestError] = {}
    missing: dict[int, list[str]] = {}

    tenant: Any = None

    def node(job_id: str) -> DagNode | None:
        value = earlier.get(job_id)
        record = decode(value) if value is not None else lookup(job_id)
        if record is None or record.get("tenant") != tenant:
            return None
        return node_of(record)

    for item in items:
        if item.depends_on:
            tenant = decode(item.value).get("tenant")
            errors, unknown = check_upstreams(item.job_id, item.depends_on, node)
            if unknown:
                missing[item.index] = unknown
            if errors:
                refused[item.index] = JobRequestError(errors)
                continue
        if item.job_id is not None:
            earlier[item.job_id] = item.value
    return refused, missing


def refusals(
    items: Sequence[DagItem],
    lookup: RecordLookup,
    decode: Callable[[bytes], Mapping[str, Any]],
    catch_up: Callable[[Collection[str]], None],
) -> dict[int, JobRequestError]:
    """The items nothing could run, by index; ``catch_up(ids)`` brings the view up to date
    with those jobs' partitions (or raises ``ViewNotReadyError``) before a second look."""
    refused, missing = _check(items, lookup, decode)
    if not missing:
        return refused
    catch_up({job_id for ids in missing.values() for job_id in ids})
    return _check(items, lookup, decode)[0]


async def refusals_async(
    items: Sequence[DagItem],
    lookup: RecordLookup,
    decode: Callable[[bytes], Mapping[str, Any]],
    catch_up: Callable[[Collection[str]], Awaitable[bool]],
) -> dict[int, IngestError]:
    """Like :func:`refusals` on an event loop; ``catch_up(ids)`` answers False when the view
    did not catch up in time: then an item that named an id nobody knew is not refused but
    answered ``ViewNotReadyError`` (503: retry)."""
    refused, missing = _check(items, lookup, decode)
    if not missing:
        return dict(refused)
    if await catch_up({job_id for ids in missing.values() for job_id in ids}):
        return dict(_check(items, lookup, decode)[0])
    behind = ViewNotReadyError(
        "the status view did not read the latest state of the jobs topic in time to know "
        "this job's upstreams; retry shortly",
        retry_after_s=1.0,
    )
    return {index: behind if index in missing else error for index, error in refused.items()}
