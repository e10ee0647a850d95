"""Per-tenant execution rate limits: a durable reservation clock per (partition, tenant).

A tenant limited to ``L`` executions/s gets ``L / P`` in each of the ``P`` partitions of
``jobs``, whichever timer owns them, so the group's fires sum to at most ``L`` however the
partitions are spread over processes (a tenant whose due jobs sit in few partitions gets
less than ``L``). Each partition keeps, per limited tenant, the time of its next free slot
(GCRA, virtual scheduling, no burst): a fire of that tenant due at ``t`` gets the slot
``max(t, next)``, and ``next`` becomes the slot plus ``P * 1000 / L`` ms (rounded up to the
microsecond). The clock is kept in the partition's ``jobs`` store (``CLOCK_PREFIX`` +
tenant, microseconds) and written in the drain's transaction with the fires it placed: it
travels with the partition to its next owner and survives a restart, so fires waiting at
their slots and new reservations never overlap.

``throttle.py`` uses the slot; this object also holds the in-flight limits
(``in_flight.py``). An aborted transaction leaves the clock in memory ahead of
the stored one: slots are then given later than needed (never sooner) until the partition
is revoked or the process restarts.
"""

from __future__ import annotations

import math
import struct
from collections import Counter
from collections.abc import Mapping
from typing import Protocol

from services.timer.in_flight import InFlightLimits
from streams.avro_binary import avro_string

CLOCK_PREFIX = b"\xfftenant-clock."
"""In the ``jobs`` store, followed by the tenant's UTF-8 name; ``\\xff`` starts no job id."""
DEFAULT_TENANT = "*"
"""The limit of every tenant not named."""
_PACK_U64 = struct.Struct(">Q")


class _Store(Protocol):
    """What the clocks need of the ``jobs`` store (``scope.StoreTransaction``)."""

    def get(self, key: bytes) -> bytes | None: ...

    def set(self, key: bytes, value: bytes) -> None: ...


class TenantLimits:
    """The executions/s limit of each tenant, split per partition, and the clocks keeping it."""

    def __init__(
        self,
        executions_per_s: Mapping[str, float],
        partitions: int,
        in_flight: Mapping[str, int] | None = None,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self._interval_us: dict[str, int] = {}
        for tenant, rate in executions_per_s.items():
            if rate <= 0:
                raise ValueError(f"tenant {tenant!r}: executions_per_s must be > 0, got {rate}")
            # Rounded up: the slots of all partitions never sum to more than the limit.
            self._interval_us[tenant] = math.ceil(partitions * 1_000_000 / rate)
        self._default_us = self._interval_us.pop(DEFAULT_TENANT, None)
        # Runs in flight per tenant (``in_flight.py``); either kind of limit makes this active.
        self.in_flight = InFlightLimits(in_flight or {}, partitions)
        self.active = bool(self._interval_us) or self._default_us is not None
        self.active = self.active or self.in_flight.active
        # (partition, tenant) -> next free slot, us; the stored clock, read once.
        self._next_us: dict[tuple[int, str], int] = {}
        self._dirty: set[tuple[int, str]] = set()
        # For the metrics, per tenant: fires given a later slot than their arrival, the sum
        # of those delays, and entries moved to a later wheel key (held).
        self.throttled: Counter[str] = Counter()
        self.delay_ms: Counter[str] = Counter()
        self.held: Counter[str] = Counter()

    def limited_suffixes(self) -> tuple[bytes, ...] | None:
        """The Avro encodings of the names of the tenants under any limit, or None when every
        tenant is (a ``"*"`` default). A first-attempt DueEvent stored in a fast wheel entry
        ends with its tenant's encoding (``drain.py``): an entry that does not end with one of
        these is of a tenant without a limit and fires on the fast path."""
        in_flight_named, in_flight_default = self.in_flight.named()
        if self._default_us is not None or in_flight_default:
            return None
        return tuple(avro_string(t) for t in sorted(set(self._interval_us) | in_flight_named))

    def interval_us(self, tenant: str) -> int | None:
        """Microseconds between the tenant's slots in one partition; None: not limited."""
        return self._interval_us.get(tenant, self._default_us)

    def reserve(self, jobs: _Store, partition: int, tenant: str, arrival_ms: int) -> int:
        """The slot (epoch ms) of an entry of ``tenant`` keyed at ``arrival_ms``; advances the
        clock. ``arrival_ms`` itself for a tenant without a limit."""
        interval_us = self.interval_us(tenant)
        if interval_us is None:
            return arrival_ms
        clock = (partition, tenant)
        next_us = self._next_us.get(clock)
        if next_us is None:
            stored = jobs.get(CLOCK_PREFIX + tenant.encode())
            next_us = _PACK_U64.unpack(stored)[0] if stored and len(stored) == 8 else 0
        slot_us = max(arrival_ms * 1000, next_us)
        self._next_us[clock] = slot_us + interval_us
        self._dirty.add(clock)
        slot_ms = -(-slot_us // 1000)
        if slot_ms > arrival_ms:
            self.throttled[tenant] += 1
            self.delay_ms[tenant] += slot_ms - arrival_ms
        return slot_ms

    def flush(self, jobs: _Store, partition: int) -> None:
        """Store the partition's clocks advanced since the last flush (the drain's end)."""
        if not self._dirty:
            return
        for clock in [c for c in self._dirty if c[0] == partition]:
            self._dirty.discard(clock)
            jobs.set(CLOCK_PREFIX + clock[1].encode(), _PACK_U64.pack(self._next_us[clock]))

    def forget(self, partition: int) -> None:
        """Drop a revoked partition's clocks (its next owner reads the stored ones)."""
        self._next_us = {c: v for c, v in self._next_us.items() if c[0] != partition}
        self._dirty = {c for c in self._dirty if c[0] != partition}
