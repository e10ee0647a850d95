"""The timer's results path as the service runs it: one scope per run of consumed results.

Run: ``.venv/bin/python -m bench.timer_results_runs [--jobs 100000] [--per-run 80]
[--baseline-root DIR --repeat N]``

Like ``bench.timer_results`` (one partition's real RocksDB stores, one-offs taken in and
fired, then only their SUCCEEDED applied, committed every ``--per-transaction``
executions), except that results are applied in runs of ``--per-run`` records sharing one
scope, as ``TimerHooks.on_records`` applies a consumed batch's records of one partition
(1,000 records over 12 partitions: ~80), their states read ahead in one multi-get where the
tree has it. Prints the main thread's CPU per execution and the
changelog records per execution (each one a produce, librdkafka and broker work that this
process does not count), for the results phase.
"""

from __future__ import annotations

import argparse
import os
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


def replay(args: argparse.Namespace) -> tuple[float, float]:
    """CPU seconds per execution and changelog records per execution of the results phase."""
    from bench.timer_results import _Stores
    from services.timer.drain import drain_due
    from services.timer.inputs import handle_input
    from services.timer.scope import Scope, TimerEnv
    from services.timer.settings import TimerSettings
    from streams.codec import Codec, RecordKind
    from streams.identity import execution_id
    from streams.records import Job
    from streams.settings import KafkaSettings

    codec = Codec.from_directory()
    settings = TimerSettings(kafka=KafkaSettings(namespace="b."), instance_id="bench-timer")
    env = TimerEnv.from_settings(settings, codec)
    folder = Path(tempfile.mkdtemp(prefix="bench-timer-runs-"))
    stores = _Stores(folder)
    changelog = _CountedChangelog()

    def scope(now_ms: int) -> Scope:
        return Scope(env, stores.jobs, stores.wheel, lambda *record: None, now_ms)

    def commit() -> None:
        for txn in (stores.jobs, stores.wheel):
            txn.prepare(changelog)
            stores.offset += 1
            txn.flush(stores.offset)
        stores.begin()

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
                commit()
        commit()
        while drain_due(scope(_T0), 5_000, collect=False):
            commit()
        commit()
        results = []
        for i in range(args.jobs):
            job_id = f"job-{i:08d}"
            record = {
                "execution_id": execution_id(job_id, _T0),
                "job_id": job_id,
                "scheduled_for_ms": _T0,
                "status": "SUCCEEDED",
                "started_at_ms": _T0 + 5,
                "recorded_at_ms": _T0 + 10,
            }
            results.append((job_id.encode(), codec.encode(RecordKind.EXECUTION_RESULT, record)))
        changelog.records = 0
        now_ms = _T0 + 1_000
        topic = env.results_topic
        started = time.thread_time()  # RocksDB's background threads excluded
        for start in range(0, len(results), args.per_run):
            run_scope = scope(now_ms)
            run = results[start : start + args.per_run]
            prefetch = getattr(stores.jobs, "prefetch", None)  # as TimerHooks.on_records does
            if prefetch is not None:
                prefetch([key for key, _ in run])
            for offset, (key, value) in enumerate(run, start):
                handle_input(run_scope, topic, 0, offset, key, value)
            now_ms += 1
            drain_due(scope(now_ms), 1_000, collect=False)
            if (start // args.per_run + 1) % (args.per_transaction // args.per_run) == 0:
                commit()
        commit()
        results_s = time.thread_time() - started
        return results_s / args.jobs, changelog.records / args.jobs
    finally:
        stores.close()
        shutil.rmtree(folder)


def _pattern_args(args: argparse.Namespace) -> list[str]:
    return [
        f"--jobs={args.jobs}",
        f"--per-run={args.per_run}",
        f"--per-transaction={args.per_transaction}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--per-run", type=int, default=80, help="results per scope")
    parser.add_argument("--per-transaction", type=int, default=2_000, help="executions")
    parser.add_argument("--baseline-root", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        cpu_s, records = replay(args)
        per_execution = f"{cpu_s * 1e6:.2f} us CPU, {records:.3f} changelog records"
        print(f"results path {per_execution} per execution")
        return
    print(f"{' '.join(_pattern_args(args))}, load {os.getloadavg()[0]:.1f}")
    from bench.ab import compare_trees  # here: a child runs with the other tree's bench

    compare_trees(Path(__file__), _pattern_args(args), args.baseline_root, args.repeat)


if __name__ == "__main__":
    main()
