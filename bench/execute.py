"""The executor's throughput: N pre-produced DueEvents, one executor process, real Kafka.

Run: ``.venv/bin/python -m bench.execute --bootstrap 127.0.0.1:9092 [--events 100000]``
(``--only noop`` runs one scenario; ``--profile DIR`` attaches py-spy to the executor and
writes ``DIR/<scenario>.txt``, collapsed stacks; ``--baseline-root DIR`` also runs the
executor of another checkout, alternately, ``--repeat N`` times; ``--root DIR`` measures
another checkout's executor instead of this one's, e.g. HEAD with only
``services/executor`` copied over, to keep other work in progress out of an A/B).

Measures in one run on one broker: the raw pipe (``bench.pipe.measure_pipe``) for the same
record count; then, per scenario, pre-produces the DueEvents, starts one executor process
(``python -m services.executor.main``) and reads ``job-results`` back ``read_committed``
until every execution's SUCCEEDED is there. Executions/s counts from the first result to
the last SUCCEEDED (Kafka timestamps of the results: results and commits included) and
is printed as a ratio to the raw produce and consume rates, with the executor process's
CPU time (user + system) per execution from the first results read to the last (start-up
excluded), in all and per thread kind (``main``: the event loop; ``rdk:*``: librdkafka's
threads; ``other``: the consume thread and handler threads). Scenarios:

- ``noop``: ``examples.noop`` (returns at once);
- ``sleep100ms-<window>``: ``examples.sleep`` with 0.1 s, ``max_in_flight`` = window.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from bench.ab import add_ab_options
from bench.due_events import due_event_record
from bench.herd import ROOT, fresh_namespace
from bench.pipe import PipeFigures, measure_pipe
from streams.codec import Codec, RecordKind
from streams.result_reader import ResultReader
from streams.settings import KafkaSettings
from streams.topics import Priority, TopicNames

CODEC = Codec.from_directory()
RESULTS = ResultReader(CODEC)


def due_record(i: int, now_ms: int, handler: str, payload: bytes) -> dict[str, object]:
    """The ``i``-th bench DueEvent (``bench.executor_path`` imports it, in a baseline too)."""
    return due_event_record(f"bench-{i:07d}", now_ms, handler=handler, payload=payload)


def produce_due(settings: KafkaSettings, count: int, handler: str, payload: bytes) -> None:
    """Produce ``count`` DueEvents to ``due.normal``, keyed by job id."""
    producer = Producer(
        settings.client_config(
            **{
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "partitioner": "murmur2_random",
                "queue.buffering.max.messages": 1_000_000,
            }
        )
    )
    topic = TopicNames(settings.namespace).due(Priority.NORMAL)
    now_ms = time.time_ns() // 1_000_000
    for i in range(count):
        record = due_record(i, now_ms, handler, payload)
        value = CODEC.encode(RecordKind.DUE_EVENT, record)
        while True:
            try:
                producer.produce(topic, value, str(record["job_id"]).encode())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError("due events were not all delivered within 120 s")


@dataclass
class Figures:
    name: str
    executions: int
    per_s: float
    wall_s: float
    statuses: Counter[str]
    rss_mb: float
    cpu_us: float  # the executor's CPU (user + system) per execution between the results
    cpu_us_by_thread: dict[str, float]  # the same, per thread kind (main, rdk:broker, ...)


def run_scenario(
    bootstrap: str, name: str, events: int, handler: str, payload: bytes, window: int,
    partitions: int, profile_dir: Path | None = None, executor_root: Path = ROOT,
    profile_name: str = "",
) -> Figures:  # fmt: skip
    # Topics deleted at the end; the state dir (with executor.log) below, if the run succeeded.
    with fresh_namespace(bootstrap, "bx", partitions, remove_state=False) as settings:
        namespace, state_dir = settings.namespace, settings.state_dir
        produce_due(settings, events, handler, payload)
        env = {
            **os.environ,
            "PYTHONPATH": str(executor_root),
            "KAFKRON_BOOTSTRAP_SERVERS": bootstrap,
            "KAFKRON_NAMESPACE": namespace,
            "KAFKRON_PARTITIONS": str(partitions),
            "KAFKRON_STATE_DIR": str(state_dir),
            "KAFKRON_EXECUTOR_WORKER_ID": "bench-executor-0",
            "KAFKRON_EXECUTOR_MAX_IN_FLIGHT": str(window),
            "KAFKRON_EXECUTOR_LANE_BUFFER_SIZE": str(max(20_000, 2 * window)),
            "KAFKRON_EXECUTOR_CONSUME_BATCH_SIZE": "5000",
            "KAFKRON_EXECUTOR_COMMIT_INTERVAL_MS": "500",
        }
        log_path = state_dir / "executor.log"
        started = time.monotonic()
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "services.executor.main"], env=env, cwd=executor_root,
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        spy = (
            None
            if profile_dir is None
            else start_profiler(process.pid, profile_dir / (profile_name or name))
        )
        try:
            first_ms, last_ms, statuses, rss, cpu_us, by_thread = read_results(
                settings, events, process.pid
            )
            wall_s = time.monotonic() - started
        finally:
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
            process.send_signal(signal.SIGTERM)
            process.wait(60)
    summary = [line for line in log_path.read_text().splitlines() if " stopping: " in line]
    if summary:
        print(f"  {name} executor: {summary[-1].split(' stopping: ')[1]}", flush=True)
    shutil.rmtree(state_dir, ignore_errors=True)  # kept (with executor.log) when it failed
    per_s = events / max((last_ms - first_ms) / 1000, 1e-3)
    return Figures(name, events, per_s, wall_s, statuses, rss, cpu_us, by_thread)


def start_profiler(pid: int, stem: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid`` (GIL holders only) into ``stem``.txt, collapsed stacks."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    py_spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(py_spy), "record", "--pid", str(pid), "--format", "raw", "--rate", "250",
         "--gil", "--nonblocking", "-o", f"{stem}.txt"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (all its threads)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds so far per thread kind of ``pid``: ``main`` (the event loop),
    librdkafka's threads by name without their numbers, ``other`` (consume, pool threads)."""
    by_kind: dict[str, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return by_kind
    for task in tasks:
        try:
            comm = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        if task.name == str(pid):
            kind = "main"
        elif comm.startswith("rdk:"):
            kind = comm.rstrip("0123456789/:").split("/")[0]
        else:
            kind = "other"
        by_kind[kind] = by_kind.get(kind, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return by_kind


def read_results(
    settings: KafkaSettings, events: int, pid: int
) -> tuple[int, int, Counter[str], float, float, dict[str, float]]:
    """Read job-results until ``events`` final results are there; then count the statuses.

    A STARTED is produced only for a run still waiting at a commit (a no-op has none, a
    100 ms one mostly has), so the end is counted in final results, read by ``ResultReader``.
    Also returns the executor's CPU time per execution from the first results read to the
    last (start-up excluded): CPU seconds over the final results read meanwhile.
    """
    consumer = Consumer(
        settings.client_config(
            **{
                "group.id": f"bench-reader-{uuid.uuid4().hex[:6]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.max.bytes": 52_428_800,
            }
        )
    )
    topic = TopicNames(settings.namespace).job_results
    consumer.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
    statuses: Counter[str] = Counter()
    finals = 0
    first_ms = last_ms = 0
    deadline = time.monotonic() + 600
    rss = 0.0
    cpu_first: tuple[float, int] | None = None
    threads_first: dict[str, float] = {}
    while finals < events and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            value = message.value()
            if message.error() is None and value is not None:
                status = RESULTS.read(value).status
                statuses[status] += 1
                finals += status != "STARTED"
                stamp = message.timestamp()[1]
                first_ms = stamp if not first_ms else min(first_ms, stamp)
                last_ms = max(last_ms, stamp)
        if statuses and cpu_first is None:
            cpu_first = (cpu_seconds(pid), finals)
            threads_first = thread_cpu_seconds(pid)
        rss = max(rss, peak_rss_mb(pid))
    cpu_us, by_thread = 0.0, {}
    if cpu_first is not None and finals > cpu_first[1]:
        per_execution = 1e6 / (finals - cpu_first[1])
        cpu_us = (cpu_seconds(pid) - cpu_first[0]) * per_execution
        by_thread = {
            kind: (seconds - threads_first.get(kind, 0.0)) * per_execution
            for kind, seconds in thread_cpu_seconds(pid).items()
        }
    consumer.close()
    return first_ms, last_ms, statuses, rss, cpu_us, by_thread


def peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sleep-events", type=int, default=50_000)
    parser.add_argument("--windows", default="2000,10000")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--only", default="", help="comma-separated scenario names to run")
    parser.add_argument("--profile", type=Path, default=None, help="py-spy output directory")
    parser.add_argument(
        "--root", type=Path, default=ROOT,
        help="the checkout whose executor is measured (default: this one); e.g. a `git "
        "archive` of HEAD with this checkout's services/executor copied over it",
    )  # fmt: skip
    add_ab_options(parser, "executor", "runs of each scenario")
    args = parser.parse_args()
    pipe = measure_pipe(args.bootstrap, args.events)
    print(f"raw pipe: produce {pipe.produce_per_s:,.0f}/s, consume {pipe.consume_per_s:,.0f}/s")
    scenarios = [("noop", args.events, "examples.noop", b"", 1000)]
    for window in (int(w) for w in args.windows.split(",") if w):
        scenarios.append((f"sleep100ms-{window}", args.sleep_events, "examples.sleep", b"0.1",
                          window))  # fmt: skip
    only = {name for name in args.only.split(",") if name}
    roots = [("", args.root)]
    if args.baseline_root:
        roots.append(("baseline ", args.baseline_root))
    for name, events, handler, payload, window in scenarios:
        if only and name not in only:
            continue
        for run in range(args.repeat):
            for label, root in roots:
                stem = f"{name}{'-baseline' if label else ''}{f'-{run}' if run else ''}"
                f = run_scenario(args.bootstrap, name, events, handler, payload, window,
                                 args.partitions, args.profile, root, stem)  # fmt: skip
                print_figures(label, f, pipe)


def print_figures(label: str, f: Figures, pipe: PipeFigures) -> None:
    print(
        f"{label}{f.name}: {f.executions:,} executions, {f.per_s:,.0f}/s first result -> last "
        f"result ({f.wall_s:.1f}s wall incl. start-up), ratio to raw produce "
        f"{f.per_s / pipe.produce_per_s:.3f}, to raw consume {f.per_s / pipe.consume_per_s:.3f}"
        f"; executor CPU {f.cpu_us:.1f} us/execution; peak RSS "
        f"{f.rss_mb:.0f} MiB; statuses {dict(f.statuses)}",
        flush=True,
    )
    threads = sorted(f.cpu_us_by_thread.items(), key=lambda item: -item[1])
    print(
        f"  {label}{f.name} CPU us/execution by thread: "
        + ", ".join(f"{kind} {us:.1f}" for kind, us in threads if us >= 0.05),
        flush=True,
    )


if __name__ == "__main__":
    main()
