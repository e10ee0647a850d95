"""The timer's results path in one process, without Kafka: CPU per execution it takes in.

Run: ``.venv/bin/python -m bench.timer_results [--jobs 100000] [--no-started]
[--run-size 80] [--per-ms 50] [--baseline-root DIR --repeat N]``

On one partition's real RocksDB stores (``jobs`` and ``wheel``, in a temporary folder):
``--jobs`` one-offs due at one instant are taken in and fired by drains (committed in
transactions of 5,000 like a herd), then their results are applied as the timer applies
them: STARTED and SUCCEEDED of each execution (only the SUCCEEDED with ``--no-started``, as
an executor publishes a run that ends without waiting), shaped as an executor writes them
(its worker id; its clock one ms on every ``--per-ms`` executions), in transactions of
``--per-transaction`` executions, with a punctuation (an empty due scan, and a collection of
fired entries unless ``--no-collect``) every ``--per-punctuation`` results. Results are
applied in runs of ``--run-size`` records sharing one scope (one clock reading), their
states read ahead in one multi-get where the tree has ``prefetch``, as
``TimerHooks.on_records`` applies a consumed batch's records of one partition (1,000 records
over 12 partitions: ~80); the default, 1, is one scope per record. Punctuations and commits
fall between runs, after the run that reaches their count. The stores' memtables are sized
as the service's. Store transactions are prepared to a changelog that counts and drops the
records and flushed to RocksDB, so the store side of the commit is counted; producing to
Kafka is not. Prints, for the results phase, CPU per execution, main thread only (no
librdkafka here, no RocksDB compactions), and changelog records per execution (each one a
produce: librdkafka and broker work that this process does not count).

With ``--baseline-root`` the same runs alternate with a child on that tree, for a ratio.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

_T0 = 1_790_000_000_000


class _CountedChangelog:
    def __init__(self) -> None:
        self.records = 0

    def produce(
        self, topic: str, key: bytes | None, value: bytes | None, partition: int | None = None
    ) -> None:
        self.records += 1


class _Record:
    """A consumed record as ``on_records`` sees it (the methods of a Kafka message it uses)."""

    __slots__ = ("_key", "_offset", "_value")

    def __init__(self, key: bytes, value: bytes, offset: int) -> None:
        self._key, self._value, self._offset = key, value, offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def offset(self) -> int:
        return self._offset

    def timestamp(self) -> tuple[int, int]:
        return 0, 0


class _Stores:
    """The two partition stores and their open transactions, committed like the processor."""

    def __init__(self, folder: Path) -> None:
        from rocksdict import WriteBufferManager

        from streams.state.partition import PartitionStore
        from streams.state.store import DEFAULT_MEMTABLE_BUDGET_BYTES

        # Memtables as the service's stores size them (``Store``): 8 MiB, one budget.
        budget = WriteBufferManager(DEFAULT_MEMTABLE_BUDGET_BYTES, False)
        self.jobs_store = PartitionStore(folder / "jobs", 0, "bench.changelog.jobs", budget)
        self.wheel_store = PartitionStore(folder / "wheel", 0, "bench.changelog.wheel", budget)
        self.changelog = _CountedChangelog()
        self.offset = 0
        self.begin()

    def begin(self) -> None:
        self.jobs = self.jobs_store.begin()
        self.wheel = self.wheel_store.begin()

    def commit(self) -> None:
        for txn in (self.jobs, self.wheel):
            txn.prepare(self.changelog)
            self.offset += 1
            txn.flush(self.offset)
        self.begin()

    def close(self) -> None:
        self.jobs_store.close()
        self.wheel_store.close()


def replay(args: argparse.Namespace) -> tuple[float, float]:
    """Take in, fire and finish ``args.jobs`` one-offs; CPU seconds and changelog records
    per execution of the results phase."""
    from services.timer import inputs
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

        def result(i: int, job_id: str, status: str) -> bytes:
            # As an executor writes them: its worker id, the clock one ms on per
            # ``--per-ms`` executions (one executor's rate in the 1M herd: ~50K/s).
            now_ms = _T0 + 10 + i // args.per_ms
            record = {
                "execution_id": execution_id(job_id, _T0),
                "job_id": job_id,
                "scheduled_for_ms": _T0,
                "status": status,
                "worker_id": "executor-7f3e2a",
                "started_at_ms": now_ms,
                "finished_at_ms": None if status == "STARTED" else now_ms,
                "recorded_at_ms": now_ms,
            }
            return codec.encode(RecordKind.EXECUTION_RESULT, record)

        statuses = ("SUCCEEDED",) if args.no_started else ("STARTED", "SUCCEEDED")
        results = [
            (f"job-{i:08d}".encode(), result(i, f"job-{i:08d}", status))
            for i in range(args.jobs)
            for status in statuses
        ]  # encoded ahead: the timed loop is the timer's work only
        # A run as TimerHooks.on_records applies it (a tree before runs: record by record;
        # before apply_results: each record through apply_input).
        apply = getattr(inputs, "apply_input", handle_input)
        apply_run = getattr(inputs, "apply_results", None)
        records = [_Record(key, value, offset) for offset, (key, value) in enumerate(results, 1)]
        finish = getattr(inputs, "finish_inputs", lambda scope: None)
        pacer = DrainPacer(1_000, 250, 20_000)  # the full collection rate (not busy)
        collect_from = b""
        now_ms = _T0 + 1_000
        topic = env.results_topic
        per_commit = args.per_transaction * len(statuses)  # records
        stores.changelog.records = 0
        started = time.thread_time()  # RocksDB's background threads excluded
        for start in range(0, len(results), args.run_size):
            run = results[start : start + args.run_size]
            run_scope = scope(now_ms)
            prefetch = getattr(run_scope.jobs, "prefetch", None)  # as TimerHooks.on_records
            if prefetch is not None and len(run) > 1:
                prefetch([key for key, _ in run])
            if apply_run is not None:
                apply_run(run_scope, 0, records[start : start + args.run_size])
            else:
                for offset, (key, value) in enumerate(run, start + 1):
                    apply(run_scope, topic, 0, offset, key, value)
            finish(run_scope)
            end = start + len(run)
            if end // args.per_punctuation > start // args.per_punctuation:
                now_ms += 10
                punctuation = scope(now_ms)
                drain_due(punctuation, 1_000, collect=False)
                if not args.no_collect:
                    limit = pacer.collect_limit(now_ms)
                    count, collect_from = collect_fired(punctuation, limit, collect_from)
                    pacer.collected(count)
            if end // per_commit > start // per_commit:
                stores.commit()
        stores.commit()
        results_s = time.thread_time() - started
        return results_s / args.jobs, stores.changelog.records / args.jobs
    finally:
        stores.close()
        shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--per-transaction", type=int, default=2_000, help="executions")
    parser.add_argument("--per-punctuation", type=int, default=200, help="results")
    parser.add_argument("--run-size", type=int, default=1, help="results per scope")
    parser.add_argument("--per-ms", type=int, default=50, help="executions per executor ms")
    parser.add_argument("--no-started", action="store_true")
    parser.add_argument("--no-collect", action="store_true")
    parser.add_argument("--baseline-root", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_size < 1 or args.per_ms < 1:
        parser.error("--run-size and --per-ms must be at least 1")
    if args.child:
        cpu_s, records = replay(args)
        per_execution = f"{cpu_s * 1e6:.2f} us CPU, {records:.3f} changelog records"
        print(f"results path {per_execution} per execution")
        return
    from bench.ab import compare_with_args  # here: a child runs with the other tree's bench

    compare_with_args(
        Path(__file__),
        args,
        "jobs",
        "per_transaction",
        "per_punctuation",
        "run_size",
        "per_ms",
        "no_started",
        "no_collect",
    )


if __name__ == "__main__":
    main()
