"""Deterministic identities: an execution is named by its job and its nominal tick."""

from __future__ import annotations


def execution_id(job_id: str, scheduled_for_ms: int) -> str:
    """The id of the execution of ``job_id`` for the tick ``scheduled_for_ms``.

    Deterministic, so replaying a window or re-firing after a crash yields the same id, and
    a handler can deduplicate its side effects by it. ``@`` is split from the right, so job
    ids may contain it.
    """
    return f"{job_id}@{scheduled_for_ms}"


def split_execution_id(value: str) -> tuple[str, int]:
    """The (job_id, scheduled_for_ms) an execution id was made from."""
    job_id, _, tick = value.rpartition("@")
    if not job_id or not tick.lstrip("-").isdigit():
        raise ValueError(f"not an execution id: {value!r}")
    return job_id, int(tick)


HANDLER_NAME_PATTERN = r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$"
"""Valid handler names, e.g. ``reports.nightly``: the API and the executor both check it."""
HANDLER_NAME_MAX_LENGTH = 200

TENANT_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""Valid tenant names: the API checks a job's tenant and the tokens file its tenants by it."""
