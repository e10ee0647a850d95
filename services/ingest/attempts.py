"""An execution's history as the status view keeps it: every attempt, not only the last.

Pure: :func:`merged_execution` folds one ``job-results`` record into the stored history of
its execution and returns the new one. The top-level fields are those of the newest
attempt (what ``recent_executions`` always showed); ``attempts`` lists each attempt once,
oldest first, with its own status, times, worker, error and next attempt time.

An attempt is found by its number within the current *round*: a replay of a dead execution
runs attempt 1 again under the same execution id (trigger REPLAY), so a REPLAY result for
an execution whose newest attempt ended it (a final status) starts a new round instead of
overwriting the attempts that led to the dead letter (when that attempt was a replay's
too, a record written after it starts the next round: a second replay). A STARTED that
arrives after its attempt's outcome (records of one attempt may come in any order across
restarts) only fills in what the outcome lacks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streams.records import FINAL_STATUSES, ExecutionStatus, Trigger

ATTEMPT_FIELDS = (
    "attempt", "status", "trigger", "reason", "error", "worker_id", "started_at_ms",
    "finished_at_ms", "next_attempt_at_ms", "recorded_at_ms",
)  # fmt: skip
"""The fields of one attempt, as ``ExecutionResult`` names them."""
_FINAL = frozenset(s.value for s in FINAL_STATUSES)
_STARTED = ExecutionStatus.STARTED.value
_REPLAY = Trigger.REPLAY.value
# Kept from an attempt's earlier record when a later one of the same attempt lacks them.
_CARRIED = ("started_at_ms", "worker_id", "error")


def attempt_of(result: Mapping[str, Any]) -> dict[str, Any]:
    """The attempt fields of an ``ExecutionResult`` dict."""
    return {name: result.get(name) for name in ATTEMPT_FIELDS}


def merged_execution(
    known: Mapping[str, Any] | None, result: Mapping[str, Any], attempts_kept: int
) -> dict[str, Any]:
    """The history of ``result``'s execution after it: ``known`` (or nothing) plus the
    result, at most ``attempts_kept`` attempts (the oldest dropped)."""
    attempts: list[dict[str, Any]] = [dict(a) for a in (known or {}).get("attempts", ())]
    entry = attempt_of(result)
    index = _same_attempt(attempts, entry)
    if index is None:
        attempts.append(entry)
    else:
        attempts[index] = _merged_attempt(attempts[index], entry)
    attempts = attempts[-attempts_kept:]
    newest = attempts[-1]
    return {
        "execution_id": result["execution_id"],
        "job_id": result["job_id"],
        "scheduled_for_ms": result["scheduled_for_ms"],
        **newest,
        "attempts": attempts,
    }


def _same_attempt(attempts: list[dict[str, Any]], entry: Mapping[str, Any]) -> int | None:
    """Where ``entry``'s attempt already is in the current round, or None (a new one)."""
    last = attempts[-1] if attempts else None
    if (
        last is not None
        and last["status"] in _FINAL
        and entry["trigger"] == _REPLAY
        and (
            last["trigger"] != _REPLAY
            or entry["attempt"] < last["attempt"]
            or (entry["recorded_at_ms"] or 0) > (last["recorded_at_ms"] or 0)
        )
    ):
        return None  # a replay of an ended execution: a new round of attempts
    for index in range(len(attempts) - 1, -1, -1):
        if attempts[index]["status"] in _FINAL and index < len(attempts) - 1:
            return None  # the end of an earlier round: never merge across it
        if attempts[index]["attempt"] == entry["attempt"]:
            return index
    return None


def _merged_attempt(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """One attempt's fields after a second record of it."""
    late = new["status"] == _STARTED or (old["status"] in _FINAL and new["status"] not in _FINAL)
    if late and old["status"] != _STARTED:
        merged = dict(old)  # a late record: the outcome stays, its missing fields filled in
        for name in _CARRIED:
            if merged.get(name) is None:
                merged[name] = new.get(name)
        return merged
    merged = dict(new)
    for name in _CARRIED:
        if merged.get(name) is None:
            merged[name] = old.get(name)
    return merged


def is_final(status: str | None) -> bool:
    """True when nothing more happens to an execution with this (newest) status."""
    return status in _FINAL
