"""When a timer's fires commit, and how fast fired wheel entries are collected.

Fires become visible to ``read_committed`` readers when their transaction commits. A drain
that caught up (it stopped short of its budget) asks for a commit within the trickle commit
delay (:func:`trickle_commit_ms`): fires emitted ``fire_ahead_ms`` early only need to be
visible before their fire time, so the fires of several punctuation rounds share one
transaction. A commit costs the timer ~1 ms of CPU (begin, flush, EndTxn, a RocksDB write),
and a trickle fires in nearly every 10 ms round. With no fire-ahead the delay is 0 and a
trickle commits at the end of the punctuation round, visible within a punctuation interval
plus one commit. A drain still behind (a hot second) lets its transaction grow for up to
``backlog_commit_interval_ms``: a herd drains in fewer, larger transactions, which cost the
broker far less per fire (markers, EndTxn) than one per punctuation round; the round that
catches up commits at once (its fires are late).

Collecting fired fast entries (a RocksDB delete and a changelog tombstone each) is
deferred work: it waits while any partition is behind and is paced by a token bucket of
``collect_per_s``, so that after a herd of a million it never crowds out fresh fires. While
the process is behind on its inputs (a full consume batch or more came in since the
partition's last punctuation: a herd's results), the bucket fills at a tenth of that rate.
At the full rate, collecting took 6% of the timer's py-spy samples during a herd of a
million (scans and deletes, their changelog records and RocksDB writes on top), 2.5% at the
trickle; the rest waits until the results are in, and the trickle still bounds the
leftovers under an input rate that never lets up.
"""

from __future__ import annotations

RESCAN_MS = 60_000
"""How often a partition's collection starts over from its first key.

A collection resumes where the last one stopped; entries below that point come back only
if the transaction deleting them aborted. They are harmless (below the watermark a fast
entry counts as fired) and the next full scan collects them."""

BUSY_COLLECT_SHARE = 0.1
"""The share of ``collect_per_s`` that collection gets while the process is behind on input."""

TRICKLE_SHARE_OF_FIRE_AHEAD = 0.5
"""At most this share of ``fire_ahead_ms`` is spent waiting for more fires before a commit.

The rest of the head start is left for the commit itself (~8 ms on a quiet machine, far more
under load) and the executor's fetch, so a fire is still visible before it is due."""


def trickle_commit_ms(interval_ms: int, fire_ahead_ms: int) -> int:
    """How long a caught-up drain's fires may wait for a commit: ``interval_ms``, capped at
    :data:`TRICKLE_SHARE_OF_FIRE_AHEAD` of ``fire_ahead_ms`` (0 without fire-ahead)."""
    return max(0, min(interval_ms, int(fire_ahead_ms * TRICKLE_SHARE_OF_FIRE_AHEAD)))


class DrainPacer:
    """Per-process commit and collection pacing of the timer's punctuations."""

    def __init__(
        self,
        batch_size: int,
        backlog_commit_interval_ms: int,
        collect_per_s: int,
        busy_inputs: int | None = None,
        trickle_commit_ms: int = 0,
    ) -> None:
        self.batch_size = batch_size
        self.backlog_commit_interval_ms = backlog_commit_interval_ms
        # How soon a caught-up drain's fires commit (see :func:`trickle_commit_ms`).
        self.trickle_commit_ms = trickle_commit_ms
        self.collect_per_s = collect_per_s
        # Inputs between two punctuations of a partition that mean "behind" (None: never).
        self.busy_inputs = busy_inputs
        self._inputs = 0  # input records applied by this process
        self._inputs_at: dict[int, int] = {}  # per partition, ``_inputs`` at its last check
        self._behind: set[int] = set()  # partitions whose last drain stopped at its budget
        self._tokens = float(batch_size)
        self._refilled_ms: int | None = None
        self._collect_from: dict[int, tuple[bytes, int]] = {}  # resume key, full scan at ms

    def commit_within_ms(self, partition: int, emitted: int) -> int | None:
        """How soon the transaction should commit after this drain (None: no need)."""
        if emitted >= self.batch_size:
            self._behind.add(partition)
            return self.backlog_commit_interval_ms
        if partition in self._behind:  # the last slice of a backlog: its fires are late
            self._behind.discard(partition)
            return 0
        if emitted:
            return self.trickle_commit_ms
        return None

    def note_inputs(self, count: int) -> None:
        """``count`` input records were applied."""
        self._inputs += count

    def busy(self, partition: int) -> bool:
        """True when a full consume batch or more came in since the partition's last check."""
        inputs = self._inputs
        since = inputs - self._inputs_at.get(partition, inputs)
        self._inputs_at[partition] = inputs
        return self.busy_inputs is not None and since >= self.busy_inputs

    def collect_limit(self, now_ms: int, busy: bool = False) -> int:
        """How many fired entries this punctuation may collect (0 while any partition lags).

        ``busy``: the process is behind on input; the bucket fills at a tenth of the rate.
        """
        if self._refilled_ms is not None:
            rate_per_s = self.collect_per_s * (BUSY_COLLECT_SHARE if busy else 1.0)
            earned = max(0, now_ms - self._refilled_ms) / 1000 * rate_per_s
            self._tokens = min(float(self.batch_size), self._tokens + earned)
        self._refilled_ms = now_ms
        if self._behind:
            return 0
        return int(self._tokens)

    def collected(self, count: int) -> None:
        """Spend tokens for ``count`` collected entries."""
        self._tokens = max(0.0, self._tokens - count)

    def collect_start(self, partition: int, now_ms: int) -> bytes:
        """The key the partition's next collection starts from (b"": its first key)."""
        resume = self._collect_from.get(partition)
        if resume is None or now_ms - resume[1] >= RESCAN_MS:
            self._collect_from[partition] = (b"", now_ms)
            return b""
        return resume[0]

    def collect_resume(self, partition: int, key: bytes) -> None:
        """The partition's collection has collected everything below ``key``."""
        resume = self._collect_from.get(partition)
        self._collect_from[partition] = (key, resume[1] if resume is not None else 0)

    def forget(self, partition: int) -> None:
        """The partition is gone (revoked or lost)."""
        self._behind.discard(partition)
        self._collect_from.pop(partition, None)
        self._inputs_at.pop(partition, None)
