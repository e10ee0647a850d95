"""When records became committed, measured on the broker instead of through a reader.

A ``read_committed`` reader sees a transaction's records only after it committed, but it
also needs time to fetch and decode them: at a million records its consume rate bounds
"last read back". :class:`StableOffsetWatch` polls the last stable offset (LSO: the first
offset not yet committed, ``list_offsets`` with ``READ_COMMITTED``) of a set of partitions
every few ms from a child process, timestamped; :func:`first_time_past` then tells when every
partition's LSO had passed the offset of its last record of interest: the moment all of
them were committed, up to one poll interval (plus one admin round trip) late.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

ROOT = Path(__file__).resolve().parent.parent
Partition = tuple[str, int]
"""(topic, partition)."""


@dataclass(frozen=True)
class StableOffsets:
    """One poll: when it was answered (epoch ms) and each partition's LSO then."""

    at_ms: int
    offsets: Mapping[Partition, int]


def first_time_past(
    polls: Sequence[StableOffsets], last_offsets: Mapping[Partition, int]
) -> int | None:
    """The time of the first poll at which every partition's LSO is past its last offset.

    ``last_offsets`` maps a partition to the offset of its last record of interest (-1:
    none); a partition absent from a poll does not count as past. None when no poll shows
    them all committed. The LSO is read between a poll's request and its answer, so the
    commit happened after the previous poll was asked and by this one's answer.
    """
    for poll in sorted(polls, key=lambda p: p.at_ms):
        if all(poll.offsets.get(tp, -1) > offset for tp, offset in last_offsets.items()):
            return poll.at_ms
    return None


@dataclass
class StableOffsetWatch:
    """Polls the LSOs of ``partitions`` every ``interval_ms`` until :meth:`stop`.

    The polling runs in a child process (``python -m bench.committed``), so that the
    benchmark's own reader (a Python loop over every record, holding the GIL) cannot delay
    a poll; its cost is measured apart: :attr:`cpu_s` is the child's CPU time while polling.
    """

    bootstrap: str
    partitions: Sequence[Partition]
    interval_ms: int = 20
    polls: list[StableOffsets] = field(default_factory=list)
    failures: int = 0
    cpu_s: float = 0.0
    _process: subprocess.Popen[bytes] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def start(self) -> StableOffsetWatch:
        """Start polling (call shortly before the records of interest are produced)."""
        spec = ",".join(f"{topic}:{partition}" for topic, partition in self.partitions)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "bench.committed", self.bootstrap, spec, str(self.interval_ms)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        if self._process.stdout is None or self._process.stdout.readline() != b"polling\n":
            raise RuntimeError("the LSO watch did not start")
        return self

    def stop(self) -> None:
        """Stop polling and collect the polls and the CPU the polling used (idempotent)."""
        process = getattr(self, "_process", None)
        if process is None:
            return
        self._process = None
        out, _ = process.communicate(b"stop\n", timeout=60)
        report = json.loads(out)
        self.polls = [
            StableOffsets(at_ms, {self.partitions[i]: o for i, o in enumerate(offsets)})
            for at_ms, offsets in report["polls"]
        ]
        self.failures, self.cpu_s = report["failures"], report["cpu_s"]

    def intervals_ms(self) -> tuple[int, int]:
        """Median and largest gap between consecutive answered polls (ms)."""
        times = [p.at_ms for p in self.polls]
        gaps = sorted(b - a for a, b in pairwise(times))
        if not gaps:
            return 0, 0
        return gaps[len(gaps) // 2], gaps[-1]


def poll_until_told(bootstrap: str, partitions: Sequence[Partition], interval_ms: int) -> None:
    """The child's loop: poll every ``interval_ms`` until stdin says stop, then print JSON."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}
    order = [(t, p) for t, p in partitions]
    stop = threading.Event()

    def stop_when_told() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=stop_when_told, daemon=True).start()
    polls: list[tuple[int, list[int]]] = []
    failures = 0

    def poll() -> None:
        nonlocal failures
        futures = admin.list_offsets(
            request, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=5
        )
        try:
            offsets = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
            polls.append((time.time_ns() // 1_000_000, [offsets[tp] for tp in order]))
        except KafkaException:
            failures += 1

    poll()  # connects and learns the leaders: later polls are one round trip each
    print("polling", flush=True)
    cpu_before_s = time.process_time()
    while not stop.is_set():
        asked = time.monotonic()
        poll()
        stop.wait(max(0.0, interval_ms / 1000 - (time.monotonic() - asked)))
    cpu_s = time.process_time() - cpu_before_s
    print(json.dumps({"polls": polls, "failures": failures, "cpu_s": cpu_s}), flush=True)


if __name__ == "__main__":
    bootstrap_arg, spec_arg, interval_arg = sys.argv[1:4]
    partitions_arg = [
        (item.rsplit(":", 1)[0], int(item.rsplit(":", 1)[1])) for item in spec_arg.split(",")
    ]
    poll_until_told(bootstrap_arg, partitions_arg, int(interval_arg))
