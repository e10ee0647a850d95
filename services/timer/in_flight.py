"""Per-tenant in-flight limits: executions emitted and not finished, counted per partition.

A tenant limited to ``N`` runs in flight may have ``max(1, N // P)`` of them in each of the
``P`` partitions of ``jobs``: at most ``N`` across the group when ``N >= P`` (else one per
partition, ``P`` in all), whichever timers own the partitions. Everything is in the
partition's ``jobs`` store and changes in the transaction of the fire or result that
changes it, so it moves with the partition and a restart finds it exact (no rebuild):

* ``RUN_PREFIX + job_id + tick`` -> tenant: an execution emitted under a limit and not
  finished (its final result not yet applied);
* ``COUNT_PREFIX + tenant`` -> how many of those the tenant has in the partition;
* ``PARK_PREFIX + tenant + 0x00 + fire_at + tick + job_id`` -> a DueEvent (priority index
  and bytes) waiting for a free run, in fire-time order.

A final result of a counted execution frees its run and emits the tenant's oldest parked
DueEvent in that result's transaction (``throttle.py``): no polling. An execution's
retries run under its one count. A limit lowered at a restart lets parked fires out only as
runs finish; one removed or raised lets them out at the partition's first punctuations
(``throttle.release_unheld``), which also drops the runs of tenants no longer limited.
"""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Mapping
from typing import Protocol

RUN_PREFIX = b"\xffrun."
COUNT_PREFIX = b"\xffrun-count."
PARK_PREFIX = b"\xffpark."
_U64 = struct.Struct(">Q")


class _Store(Protocol):
    def get(self, key: bytes) -> bytes | None: ...

    def set(self, key: bytes, value: bytes) -> None: ...

    def delete(self, key: bytes) -> None: ...

    def iter_range(self, start: bytes, end: bytes, limit: int) -> list[tuple[bytes, bytes]]: ...


def run_key(job_id: bytes, tick_ms: int) -> bytes:
    """The key of an emitted, unfinished execution."""
    return RUN_PREFIX + _U64.pack(max(tick_ms, 0)) + job_id


def park_prefix(tenant: str) -> bytes:
    """Where a tenant's parked DueEvents start (``+ b"\\x01"``: where they end)."""
    return PARK_PREFIX + tenant.encode() + b"\x00"


def park_key(tenant: str, fire_at_ms: int, tick_ms: int, job_id: bytes) -> bytes:
    """The key of a parked DueEvent: the tenant's parked ones in fire-time order."""
    return park_prefix(tenant) + _U64.pack(max(fire_at_ms, 0)) + _U64.pack(max(tick_ms, 0)) + job_id


def parked_job_and_tick(key: bytes, tenant: str) -> tuple[bytes, int]:
    """The job id and tick of a parked DueEvent's key."""
    at = len(park_prefix(tenant)) + 8
    return key[at + 8 :], int(_U64.unpack_from(key, at)[0])


class InFlightLimits:
    """The in-flight share of each tenant and the per-partition counts (module docstring)."""

    def __init__(self, in_flight: Mapping[str, int], partitions: int) -> None:
        shares = {tenant: max(1, n // partitions) for tenant, n in in_flight.items()}
        for tenant, n in in_flight.items():
            if n < 1:
                raise ValueError(f"tenant {tenant!r}: in_flight must be >= 1, got {n}")
        self._default = shares.pop("*", None)
        self._shares = shares
        self.active = bool(shares) or self._default is not None
        self._counts: dict[tuple[int, str], int] = {}  # last read, for the metrics
        self.parked: Counter[str] = Counter()  # DueEvents parked, by tenant (metrics)
        self.released: Counter[str] = Counter()

    def named(self) -> tuple[frozenset[str], bool]:
        """The tenants limited by name, and whether every other tenant is limited too (a
        ``"*"`` default)."""
        return frozenset(self._shares), self._default is not None

    def share(self, tenant: str) -> int | None:
        """How many runs ``tenant`` may have in flight in one partition; None: no limit."""
        return self._shares.get(tenant, self._default)

    def count(self, jobs: _Store, partition: int, tenant: str) -> int:
        """The tenant's runs in flight in ``partition``: the stored count, read each time
        (the transaction's own writes included), so an aborted transaction leaves nothing
        behind in memory to drift from."""
        stored = jobs.get(COUNT_PREFIX + tenant.encode())
        n: int = _U64.unpack(stored)[0] if stored and len(stored) == 8 else 0
        self._counts[(partition, tenant)] = n  # for the metrics only
        return n

    def in_flight(self) -> dict[str, int]:
        """Runs in flight per tenant over the partitions counted in this process."""
        total: Counter[str] = Counter()
        for (_, tenant), n in self._counts.items():
            total[tenant] += n
        return dict(total)

    def admit(self, jobs: _Store, partition: int, tenant: str, job_id: bytes, tick: int) -> bool:
        """Count the execution as running and True when the tenant has a free run; False
        (nothing changed) when it is at its share."""
        share = self.share(tenant)
        if share is None:
            return True
        n = self.count(jobs, partition, tenant)
        if n >= share:
            return False
        jobs.set(run_key(job_id, tick), tenant.encode())
        self._store(jobs, partition, tenant, n + 1)
        return True

    def finish(self, jobs: _Store, partition: int, job_id: bytes, tick: int) -> str | None:
        """Forget a finished execution; its tenant when it was counted (a run is free)."""
        key = run_key(job_id, tick)
        tenant_bytes = jobs.get(key)
        if tenant_bytes is None:
            return None
        jobs.delete(key)
        tenant = tenant_bytes.decode()
        self._store(jobs, partition, tenant, max(0, self.count(jobs, partition, tenant) - 1))
        return tenant

    def forget(self, partition: int) -> None:
        """Drop a revoked partition's counts from the metrics (its next owner counts them)."""
        self._counts = {k: n for k, n in self._counts.items() if k[0] != partition}

    def _store(self, jobs: _Store, partition: int, tenant: str, n: int) -> None:
        self._counts[(partition, tenant)] = n
        jobs.set(COUNT_PREFIX + tenant.encode(), _U64.pack(n))
