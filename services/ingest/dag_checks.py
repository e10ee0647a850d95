"""Whether anything could ever run a job with ``depends_on``: checked at creation, no I/O.

A dependent runs once per DAG run, after each upstream's execution of that run succeeded; a
run is named by the tick of the roots (the transitive upstreams without ``depends_on``)
that started it. So a dependent nothing could run is refused (422 at ``depends_on``) when:

* an upstream, direct or transitive, is unknown (never created, or deleted) or CANCELLED;
* its upstreams make a cycle (through the new job, or among themselves);
* its roots do not all share one schedule (the same cron expression and time zone, or the
  same ``run_at``): their ticks never name the same run.

The walk reads jobs through a ``lookup`` (the caller's: an overlay of the same batch, this
process's own writes, the status view) and is bounded by :data:`MAX_DAG_JOBS`. Ids the
lookup did not know are returned as ``unknown``, so a caller can catch its view up with
their partitions and check again before it refuses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from streams.records import JobStatus

MAX_DAG_JOBS = 10_000
"""How many upstream jobs one check may visit; a larger graph is refused, naming the limit."""
_NEW_JOB = ""  # the walk's start when the new job's id is not chosen yet (never a job id)


@dataclass(frozen=True, slots=True)
class DagNode:
    """What the checks need of one job: its status, upstreams and schedule.

    ``schedule`` is a readable text that is equal for two jobs exactly when their ticks are
    (``cron '0 2 * * *' in Europe/Berlin``, ``run_at 1800000000000``); None for a dependent.
    """

    job_id: str
    status: str
    depends_on: tuple[str, ...]
    schedule: str | None


def schedule_text(record: Mapping[str, Any]) -> str | None:
    """The schedule of a Job record as :attr:`DagNode.schedule` writes it."""
    cron = record.get("cron")
    if cron is not None:
        return f"cron {cron['expression']!r} in {cron['timezone']}"
    run_at = record.get("run_at_ms")
    return None if run_at is None else f"run_at {run_at}"


def node_of(record: Mapping[str, Any]) -> DagNode:
    """The :class:`DagNode` of a Job record (as the codec or the view decodes it)."""
    return DagNode(
        record["job_id"],
        str(record["status"]),
        tuple(record.get("depends_on") or ()),
        schedule_text(record),
    )


Lookup = Callable[[str], DagNode | None]


@dataclass
class UpstreamWalk:
    """Everything above one job: the jobs found, its roots, and what is wrong on the way.

    ``via`` names, for each job found (or missing), the direct upstream of the start it was
    reached through.
    """

    nodes: dict[str, DagNode] = field(default_factory=dict)
    roots: dict[str, DagNode] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    cycle: list[str] | None = None
    via: dict[str, str] = field(default_factory=dict)
    too_large: bool = False


def walk_upstreams(
    job_id: str | None, depends_on: Sequence[str], lookup: Lookup, max_jobs: int = MAX_DAG_JOBS
) -> UpstreamWalk:
    """Depth-first over ``depends_on`` and the upstreams' own, each job looked up once.

    ``job_id`` is the job being created or replaced (None: a fresh id nobody can name), so
    reaching it again is a cycle whatever the lookup says about it.
    """
    walk = UpstreamWalk()
    start = _NEW_JOB if job_id is None else job_id
    stack: list[tuple[str, Iterator[str]]] = [(start, iter(depends_on))]
    on_path = {start: 0}
    done: set[str] = set()
    while stack:
        current, upstreams = stack[-1]
        upstream = next(upstreams, None)
        if upstream is None:
            stack.pop()
            del on_path[current]
            done.add(current)
            continue
        if upstream in on_path:
            if walk.cycle is None:
                walk.cycle = [name for name, _ in stack[on_path[upstream] :]] + [upstream]
            continue
        if upstream in done:
            continue
        done.add(upstream)  # visited once, whatever it turns out to be
        walk.via.setdefault(upstream, stack[1][0] if len(stack) > 1 else upstream)
        node = lookup(upstream)
        if node is None:
            walk.missing.append(upstream)
        elif node.status == JobStatus.CANCELLED:
            walk.cancelled.append(upstream)
        elif len(walk.nodes) >= max_jobs:
            walk.too_large = True
            break
        else:
            walk.nodes[upstream] = node
            if node.depends_on:
                done.discard(upstream)  # done when its own upstreams are
                on_path[upstream] = len(stack)
                stack.append((upstream, iter(node.depends_on)))
            else:
                walk.roots[upstream] = node
    return walk


def _error(message: str, depends_on: Sequence[str]) -> dict[str, Any]:
    return {"type": "value_error", "loc": ["depends_on"], "msg": message,
            "input": list(depends_on)}  # fmt: skip


def _named(ids: Sequence[str], walk: UpstreamWalk) -> str:
    """``'a', 'b' (upstream of 'join')``: each id, and the direct upstream it hides behind."""
    parts = []
    for name in ids:
        via = walk.via.get(name, name)
        parts.append(repr(name) if via == name else f"{name!r} (upstream of {via!r})")
    return ", ".join(parts)


def upstream_errors(walk: UpstreamWalk, depends_on: Sequence[str]) -> list[dict[str, Any]]:
    """The 422 errors (``loc`` ``["depends_on"]``) of a walk; empty when a run can happen."""
    errors: list[dict[str, Any]] = []
    if walk.missing:
        errors.append(_error(
            f"depends_on names jobs that do not exist: {_named(walk.missing, walk)}; create "
            "them first (in a batch, an upstream counts when it comes before its dependents)",
            depends_on,
        ))  # fmt: skip
    if walk.cancelled:
        errors.append(_error(
            f"depends_on names cancelled jobs, which never run again: "
            f"{_named(walk.cancelled, walk)}; depend on jobs that are scheduled",
            depends_on,
        ))  # fmt: skip
    if walk.cycle is not None:
        path = " -> ".join(name or "<this job>" for name in walk.cycle)
        errors.append(_error(
            f"depends_on makes a cycle: {path}; a job can never run after itself", depends_on
        ))  # fmt: skip
    if walk.too_large:
        errors.append(_error(
            f"the jobs above this one are more than {MAX_DAG_JOBS}; split the DAG", depends_on
        ))  # fmt: skip
    if not errors:
        mismatch = _schedule_mismatch(walk)
        if mismatch is not None:
            errors.append(_error(mismatch, depends_on))
    return errors


def _schedule_mismatch(walk: UpstreamWalk) -> str | None:
    """Why the roots' ticks never meet, or None when they share one schedule."""
    by_schedule: dict[str, list[str]] = {}
    for name, node in walk.roots.items():
        by_schedule.setdefault(node.schedule or "no schedule", []).append(name)
    if len(by_schedule) <= 1:
        return None
    groups = "; ".join(
        f"{schedule}: {_named(sorted(names), walk)}"
        for schedule, names in sorted(by_schedule.items())
    )
    return (
        "the roots feeding this job (its upstreams without depends_on) do not share one "
        f"schedule, so no DAG run ever has all of them: {groups}. Give every root the same "
        "cron expression and time zone, or the same run_at"
    )


def check_upstreams(
    job_id: str | None, depends_on: Sequence[str], lookup: Lookup
) -> tuple[list[dict[str, Any]], list[str]]:
    """The errors of a job with ``depends_on`` as ``lookup`` sees its upstreams, and the ids
    it did not know (check again once the view has caught up with them)."""
    walk = walk_upstreams(job_id, depends_on, lookup)
    return upstream_errors(walk, depends_on), walk.missing
