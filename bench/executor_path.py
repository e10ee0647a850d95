"""The executor's record path in one process, without Kafka: CPU per execution of a no-op run.

Run: ``.venv/bin/python -m bench.executor_path [--records 200000] [--partitions 12]
[--per-commit 25000] [--run-length 500] [--profile] [--baseline-root DIR --repeat N]``

What ``bench.execute`` measures minus Kafka: ``--records`` DueEvents of distinct one-offs
(built as the timer writes them, all due already) are handed to the lane buffers in consumer
batches of 2,000, ``--run-length`` records of one partition in a row (a consumer hands over
what it fetched of a partition at once: 100K due events already on 12 partitions came in
runs of 1,745 records, median, from ``consume(5000)``; 1 is round robin, the worst case),
and run by the executor's own chains and :class:`RecordRunner` with the ``examples.noop``
handler, on a real dedup store (RocksDB on disk, in a temporary folder, the
default retention). Every ``--per-commit`` records the commit's store side runs: the outputs
are handed over, the dedup store is prepared to a producer that counts and drops records, and
flushed to RocksDB. Nothing goes to a broker, so consuming, librdkafka's threads, the
transaction commit and the broker's work are not counted: the figure is the event loop's share
of an execution, on its thread only (``time.thread_time``), with the part spent in commits and
the changelog records per execution (each one a produce: librdkafka and broker work that this
process does not count). ``--profile`` prints cProfile's top functions by own time (which
inflates every Python call: read shares, not microseconds).

With ``--baseline-root`` the same runs alternate with a child on that tree, for a ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import shutil
import tempfile
import time
from inspect import signature
from pathlib import Path

_BATCH = 2_000  # records per consumer batch, as the executor's consume_batch_size


class _CountingProducer:
    """What the runner and the dedup store produce to, counted and dropped."""

    def __init__(self) -> None:
        self.outputs = 0
        self.changelog = 0
        self._offset = 0

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        self.outputs += 1

    def produce_many(
        self, records: list[tuple[str, bytes | None, bytes | None]], partition: int | None = None
    ) -> None:
        self.outputs += len(records)

    def produce_changelog(
        self, topic: str, partition: int, items: list[tuple[bytes, bytes | None]]
    ) -> None:
        self.changelog += len(items)
        self._offset += len(items)

    def delivered_offset(self, topic: str, partition: int) -> int | None:
        return self._offset


class _OwnsEverything:
    """The assignment of a process that owns every partition, for good."""

    def __init__(self) -> None:
        from services.executor.assignment import Token  # the measured tree's

        self._token = Token()

    def token_to_start(self, tp: tuple[str, int]) -> object:
        return self._token

    def is_current(self, tp: tuple[str, int], token: object) -> bool:
        return token is self._token


async def _replay(args: argparse.Namespace, folder: Path) -> tuple[float, float, float, float]:
    """Run the records; (CPU s per execution, of which in commits, changelog records per
    execution, outputs per execution)."""
    from confluent_kafka import Message

    from bench.execute import due_record
    from services.executor.chains import Chains
    from services.executor.deadlines import Deadlines
    from services.executor.dedup import DEFAULT_RETENTION_MS, DedupStore
    from services.executor.handlers import HandlerRegistry
    from services.executor.lane_buffers import LaneBuffers
    from services.executor.offsets import OffsetTracker
    from services.executor.runs import RecordRunner
    from services.executor.stats import ExecutorStats
    from services.executor.sync_pool import SyncHandlerPool
    from streams.codec import Codec, RecordKind
    from streams.topics import Priority, TopicNames

    codec = Codec.from_directory()
    names = TopicNames("bench.")
    topic = names.due(Priority.NORMAL)
    now_ms = time.time_ns() // 1_000_000 - 1_000
    run_length, partitions = args.run_length, args.partitions
    messages = [
        Message(
            topic=topic,
            partition=(i // run_length) % partitions,
            offset=i // (run_length * partitions) * run_length + i % run_length,
            key=f"bench-{i:07d}".encode(),
            value=codec.encode(RecordKind.DUE_EVENT, due_record(i, now_ms, "examples.noop", b"{}")),
        )
        for i in range(args.records)
    ]
    # The executor's default dedup changelog format (v3), where the tree has it.
    try:
        formats = (
            {"entries_in_index": True}
            if "entries_in_index" in signature(DedupStore).parameters
            else {}
        )
    except ValueError:  # compiled (streams.native): no signature, and a tree that has it
        formats = {"entries_in_index": True}
    dedup = DedupStore(
        "bench",
        folder,
        names.changelog("bench", "dedup"),
        retention_ms=DEFAULT_RETENTION_MS,
        **formats,  # type: ignore[arg-type]
    )
    offsets: OffsetTracker[tuple[str, int]] = OffsetTracker()
    for partition in range(args.partitions):
        dedup.store.open_partition(partition)
    registry = HandlerRegistry()
    registry.load_spec("examples.noop=services.executor.examples:noop")
    producer = _CountingProducer()
    stats = ExecutorStats()
    runner = RecordRunner(
        worker_id="bench-executor", names=names, codec=codec, registry=registry,
        pool=SyncHandlerPool(1), producer=producer, dedup=dedup,  # type: ignore[arg-type]
        assignment=_OwnsEverything(), offsets=offsets, stats=stats,  # type: ignore[arg-type]
        request_abort=lambda reason: print(f"abort requested: {reason}"),
        deadlines=Deadlines(asyncio.get_running_loop()), holds=None,
    )  # fmt: skip
    buffers = LaneBuffers({topic: Priority.NORMAL}, args.records + 1)
    chains = Chains(buffers, runner.start, 3_000)
    profile = cProfile.Profile() if args.profile else None
    commit_s = 0.0
    since_commit = 0
    started = time.thread_time()
    if profile is not None:
        profile.enable()
    for first in range(0, args.records, _BATCH):
        for message in messages[first : first + _BATCH]:
            buffers.add(message)
        while len(buffers) or len(chains):  # as the executor's loop turns
            chains.dispatch()
            await asyncio.sleep(0)
        runner.flush_due_outputs()
        since_commit += _BATCH
        if since_commit >= args.per_commit or first + _BATCH >= args.records:
            since_commit = 0
            commit_started = time.thread_time()
            runner.flush_outputs()
            dedup.prepare(producer)  # type: ignore[arg-type]
            dedup.flush(producer)  # type: ignore[arg-type]
            commit_s += time.thread_time() - commit_started
    if profile is not None:
        profile.disable()
    cpu_s = time.thread_time() - started
    dedup.close()
    if stats.succeeded != args.records:
        raise SystemExit(f"{stats.succeeded} of {args.records} runs succeeded")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)
    n = args.records
    return cpu_s / n, commit_s / n, producer.changelog / n, producer.outputs / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--per-commit", type=int, default=25_000, help="records per commit")
    parser.add_argument(
        "--run-length", type=int, default=500,
        help="records of one partition in a row, as consumed (1: round robin)",
    )  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="cProfile, top own times")
    parser.add_argument("--baseline-root", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if min(args.records, args.partitions, args.per_commit, args.run_length) < 1:
        parser.error("--records, --partitions, --per-commit and --run-length must be at least 1")
    if args.child:
        folder = Path(tempfile.mkdtemp(prefix="bench-executor-path-"))
        try:
            cpu_s, commit_s, changelog, outputs = asyncio.run(_replay(args, folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print(
            f"record path {cpu_s * 1e6:.2f} us CPU per execution ({commit_s * 1e6:.2f} in "
            f"commits), {changelog:.3f} changelog records and {outputs:.3f} outputs per execution"
        )
        return
    from bench.ab import compare_with_args  # here: a child runs with the other tree's bench

    compare_with_args(
        Path(__file__), args, "records", "partitions", "per_commit", "run_length", "profile"
    )


if __name__ == "__main__":
    main()
