"""Tenant ranks: the order in which one instant's scheduled entries fire, tenant by tenant.

A scheduled entry's wheel key is ``fire_ms | rank | job_id`` (``keys.py``); ``rank`` is the
job's ordinal among the entries its tenant got at that fire time in that partition,
divided by the tenant's weight (default 1). A drain scans keys in order, so one instant's
entries fire in rounds: every tenant's rank-0 entries, then every rank-1 entry, and so on;
a tenant of weight ``w`` gets ``w`` entries per round.

*The bound.* In one partition, with tenants ``u`` of weight ``w_u`` active at an instant,
the ``i``-th entry (from 0) of tenant ``t`` has rank ``r = i // w_t`` and fires after at
most ``sum_u min(n_u, w_u * (r + 1))`` entries of that instant, where ``n_u`` is how many
entries ``u`` has there. With equal weights and ``T`` tenants, all ``n`` entries of a tenant
fire within the first ``T * n`` of that instant, whatever the other tenants' backlog; a
tenant alone still fires all its entries back to back (the other tenants' spare capacity).
Entries keyed at earlier fire times still fire first, and non-scheduled entries (manual,
retry, backfill, retention) are not ranked: at one instant they follow the ranked ones.

*The counters* are a cache in memory, not state: an entry's rank is stored with it (the
key, and the job's ``sched_rank``), so moving or deleting it never needs a counter. A
counter lost (a restart, a partition moved to another timer, the cache's bound) starts that
instant's ordinals at 0 again: each loss during one instant's intake adds at most one more
round per rank, never a wrong or a lost fire. The cache holds at most ``max_instants``
(partition, fire time, tenant) counters; when full, the half with the earliest fire times
goes (those fire first, so they are the least likely to be written to again).
"""

from __future__ import annotations

from collections.abc import Mapping

from services.timer.keys import MAX_RANK

DEFAULT_MAX_INSTANTS = 65_536


class TenantRanks:
    """Hands out the rank of each new scheduled entry (see the module docstring)."""

    def __init__(
        self,
        weights: Mapping[str, int] | None = None,
        *,
        enabled: bool = True,
        max_instants: int = DEFAULT_MAX_INSTANTS,
    ) -> None:
        self.weights: dict[str, int] = dict(weights or {})
        for tenant, weight in self.weights.items():
            if weight < 1:
                raise ValueError(f"tenant {tenant!r} has weight {weight}; weights are >= 1")
        self.enabled = enabled
        self.max_instants = max(2, max_instants)
        self._counts: dict[tuple[int, int, str], int] = {}

    def rank(self, partition: int, fire_ms: int, tenant: str) -> int:
        """The rank of a new entry of ``tenant`` keyed at ``fire_ms`` in ``partition``; 0 for
        every entry when ranking is off (one instant fires in job-id order, as before)."""
        if not self.enabled:
            return 0
        counts = self._counts
        key = (partition, fire_ms, tenant)
        ordinal = counts.get(key)
        if ordinal is None:
            if len(counts) >= self.max_instants:
                self._drop_earliest()
            ordinal = 0
        counts[key] = ordinal + 1
        weight = self.weights.get(tenant, 1)
        return min(ordinal // weight, MAX_RANK)

    def forget(self, partition: int) -> None:
        """Drop a revoked partition's counters (its next owner starts its own)."""
        self._counts = {key: n for key, n in self._counts.items() if key[0] != partition}

    def __len__(self) -> int:
        return len(self._counts)

    def _drop_earliest(self) -> None:
        """Keep the half of the counters with the latest fire times."""
        by_time = sorted(self._counts, key=lambda key: key[1])
        for key in by_time[: len(by_time) // 2 + 1]:
            del self._counts[key]
