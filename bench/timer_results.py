"""The timer's results path in one process, without Kafka: CPU per execution it takes in.

Run: ``.venv/bin/python -m bench.timer_results [--jobs 100000] [--no-started]
[--baseline-root DIR --repeat N]``

On one partition's real RocksDB stores (``jobs`` and ``wheel``, in a temporary folder):
``--jobs`` one-offs due at one instant are taken in and fired by drains (committed in
transactions of 5,000 like a herd), then their results are applied as the timer applies
them: STARTED and SUCCEEDED of each execution (only the SUCCEEDED with ``--no-started``, as
an executor publishes a run that ends without waiting), in transactions of
``--per-transaction`` executions, with a punctuation (an empty due scan, and a collection of
fired entries unless ``--no-collect``) every ``--per-punctuation`` results. Store
transactions are prepared to a changelog that drops the records and flushed to RocksDB, so
the store side of the commit is counted; producing to Kafka is not. Prints CPU per
execution of the results phase, main thread only (no librdkafka here, no RocksDB
compactions).

With ``--baseline-root`` the same runs alternate with a child on that tree, for a ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

_T0 = 1_790_000_000_000


class _DroppedChangelog:
    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        pass


class _Stores:
    """The two partition stores and their open transactions, committed like the processor."""

    def __init__(self, folder: Path) -> None:
        from streams.state.partition import PartitionStore

        self.jobs_store = PartitionStore(folder / "jobs", 0, "bench.changelog.jobs")
        self.wheel_store = PartitionStore(folder / "wheel", 0, "bench.changelog.wheel")
        self.offset = 0
        self.begin()

    def begin(self) -> None:
        self.jobs = self.jobs_store.begin()
        self.wheel = self.wheel_store.begin()

    def commit(self) -> None:
        for txn in (self.jobs, self.wheel):
            txn.prepare(_DroppedChangelog())
            self.offset += 1
            txn.flush(self.offset)
        self.begin()

    def close(self) -> None:
        self.jobs_store.close()
        self.wheel_store.close()


def replay(args: argparse.Namespace) -> dict[str, float]:
    """Take in, fire and finish ``args.jobs`` one-offs; CPU seconds per execution by phase."""
    from services.timer.drain import drain_due
    from services.timer.inputs import handle_input
    from services.timer.pacing import DrainPacer
    from services.timer.scope import Scope, TimerEnv
    from services.timer.settings import TimerSettings
    from services.timer.wheel import collect_fired
    from streams.codec import Codec, RecordKind
    from streams.identity import execution_id
    from streams.records import Job
    from streams.settings import KafkaSettings

    codec = Codec.from_directory()
    settings = TimerSettings(kafka=KafkaSettings(namespace="b."), instance_id="bench-timer")
    env = TimerEnv.from_settings(settings, codec)
    folder = Path(tempfile.mkdtemp(prefix="bench-timer-results-"))
    stores = _Stores(folder)
    out: list[Any] = []

    def scope(now_ms: int) -> Scope:
        return Scope(env, stores.jobs, stores.wheel, lambda *record: None, now_ms)

    try:
        for i in range(args.jobs):
            job = Job(
                job_id=f"job-{i:08d}",
                version=1,
                handler="examples.noop",
                run_at_ms=_T0,
                created_at_ms=_T0 - 60_000,
                updated_at_ms=_T0 - 60_000,
            )
            value = codec.encode(RecordKind.JOB, job.to_avro())
            handle_input(scope(_T0 - 30_000), env.jobs_topic, 0, i, job.job_id.encode(), value)
            if i % 5_000 == 4_999:
                stores.commit()
        stores.commit()
        while drain_due(scope(_T0), 5_000, collect=False):
            stores.commit()
        stores.commit()

        def result(job_id: str, status: str) -> bytes:
            record = {
                "execution_id": execution_id(job_id, _T0),
                "job_id": job_id,
                "scheduled_for_ms": _T0,
                "status": status,
                "started_at_ms": _T0 + 5,
                "recorded_at_ms": _T0 + 10,
            }
            return codec.encode(RecordKind.EXECUTION_RESULT, record)

        statuses = ("SUCCEEDED",) if args.no_started else ("STARTED", "SUCCEEDED")
        results = [
            (f"job-{i:08d}".encode(), result(f"job-{i:08d}", status))
            for i in range(args.jobs)
            for status in statuses
        ]  # encoded ahead: the timed loop is the timer's work only
        pacer = DrainPacer(1_000, 250, 20_000)  # the full collection rate (not busy)
        collect_from = b""
        now_ms = _T0 + 1_000
        started = time.thread_time()  # RocksDB's background threads excluded
        for index, (key, value) in enumerate(results, 1):
            handle_input(scope(now_ms), env.results_topic, 0, index, key, value)
            if index % args.per_punctuation == 0:
                now_ms += 10
                punctuation = scope(now_ms)
                drain_due(punctuation, 1_000, collect=False)
                if not args.no_collect:
                    limit = pacer.collect_limit(now_ms)
                    count, collect_from = collect_fired(punctuation, limit, collect_from)
                    pacer.collected(count)
            if index % (args.per_transaction * len(statuses)) == 0:
                stores.commit()
        stores.commit()
        results_s = time.thread_time() - started
        del out
        return {"results_us": results_s / args.jobs * 1e6}
    finally:
        stores.close()
        shutil.rmtree(folder)


def _pattern_args(args: argparse.Namespace) -> list[str]:
    flags = [
        f"--jobs={args.jobs}",
        f"--per-transaction={args.per_transaction}",
        f"--per-punctuation={args.per_punctuation}",
    ]
    return flags + ["--no-started"] * args.no_started + ["--no-collect"] * args.no_collect


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--per-transaction", type=int, default=2_000, help="executions")
    parser.add_argument("--per-punctuation", type=int, default=200, help="results")
    parser.add_argument("--no-started", action="store_true")
    parser.add_argument("--no-collect", action="store_true")
    parser.add_argument("--baseline-root", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(f"results path {replay(args)['results_us']:.2f} us CPU per execution")
        return
    print(f"{' '.join(_pattern_args(args))}, load {os.getloadavg()[0]:.1f}")
    from bench.ab import compare_trees  # here: a child runs with the other tree's bench

    compare_trees(Path(__file__), _pattern_args(args), args.baseline_root, args.repeat)


if __name__ == "__main__":
    main()
