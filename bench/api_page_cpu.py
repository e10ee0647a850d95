"""In-process CPU of the status view: a page of 100 jobs, and one apply of a job or a result.

    .venv/bin/python -m bench.api_page_cpu [--jobs 100000] [--executions 2] [--repeat 5]

No broker: a ViewStore in a temporary directory gets ``--jobs`` jobs shaped as
``bench.api_reads`` creates them (recurring over four cron expressions, a tenth one-offs, 20
tenants, 50 teams), applied in slices of 100 as the view applies them, then
``--executions`` executions per job (STARTED then SUCCEEDED, as the executor writes them).
Printed: CPU (``time.thread_time``) per applied job and per applied result, then per page
(``GET /api/jobs?limit=100``'s body, built as the route builds it) for the first page, pages
at random cursors, a tenant+label page and a page of each filter kind and of combinations
(half of them at a random cursor), median of ``--repeat`` rounds of 200 pages.
On a tree before ``services.ingest.list_rows`` a page is built the way its route did
(decoded records and ``job_summary``), so the same script measures both sides of an A/B.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from services.ingest.job_index import JobFilter, encode_cursor  # noqa: E402
from services.ingest.json_bytes import json_bytes  # noqa: E402
from services.ingest.presenters import job_summary  # noqa: E402
from services.ingest.view_store import ViewStore  # noqa: E402
from streams.codec import Codec, RecordKind  # noqa: E402
from streams.identity import execution_id  # noqa: E402
from streams.records import CronSchedule, Job  # noqa: E402

CRONS = ["*/5 * * * *", "0 * * * *", "30 2 * * *", "0 9 * * 1-5"]
SLICE = 100
PAGES = 200


def job_values(codec: Codec, jobs: int, now_ms: int) -> list[tuple[bytes, bytes]]:
    values = []
    for i in range(jobs):
        job_id = f"job-{i:08d}"
        labels = {"team": f"team{i % 50}", "env": "prod" if i % 3 else "dev"}
        when: dict[str, Any] = (
            {"run_at_ms": now_ms + 86_400_000 + i}
            if i % 10 == 0
            else {"cron": CronSchedule(expression=CRONS[i % len(CRONS)])}
        )
        job = Job(job_id=job_id, version=1, handler="bench.noop", tenant=f"tenant{i % 20}",
                  labels=labels, created_at_ms=now_ms, updated_at_ms=now_ms, **when)  # fmt: skip
        values.append((job_id.encode(), codec.encode(RecordKind.JOB, job.to_avro())))
    return values


def result_values(codec: Codec, ids: list[str], executions: int, now_ms: int) -> list[bytes]:
    values = []
    for n in range(executions):
        tick = now_ms - (executions - n) * 60_000
        for job_id in ids:
            for status in ("STARTED", "SUCCEEDED"):
                result = {
                    "execution_id": execution_id(job_id, tick), "job_id": job_id,
                    "scheduled_for_ms": tick, "attempt": 1, "status": status, "reason": None,
                    "error": None, "worker_id": "bench-worker", "started_at_ms": tick + 5,
                    "finished_at_ms": tick + 8 if status == "SUCCEEDED" else None,
                    "next_attempt_at_ms": None, "trigger": "SCHEDULE", "job_version": 1,
                    "recorded_at_ms": tick + 9,
                }  # fmt: skip
                values.append(codec.encode(RecordKind.EXECUTION_RESULT, result))
    return values


def apply_us(store: ViewStore, values: list[Any], kind: str) -> float:
    """CPU per record applied (the batch writes included), in slices like the view's."""
    started = time.thread_time()
    for start in range(0, len(values), SLICE):
        batch = store.begin()
        for value in values[start : start + SLICE]:
            if kind == "job":
                batch.apply_job(*value)
            else:
                batch.apply_result(value)
        batch.commit()
    return (time.thread_time() - started) / len(values) * 1e6


def page_body(store: ViewStore, where: JobFilter, cursor: str | None) -> bytes:
    """The body of ``GET /api/jobs``, built as this tree's route builds it."""
    now_ms = time.time_ns() // 1_000_000
    if hasattr(store, "job_page_json"):
        items, following = store.job_page_json(where, cursor, 100, now_ms)
        return b'{"items":[%s],"next_cursor":%s}' % (b",".join(items), json_bytes(following))
    rows, following = store.job_page(where, cursor, 100)
    found = [job_summary(r.job, r.lifecycle, r.last_execution, now_ms) for r in rows]
    return json_bytes({"items": found, "next_cursor": following})


def page_ms(store: ViewStore, pages: list[tuple[JobFilter, str | None]], repeat: int) -> float:
    rounds = []
    for _ in range(repeat):
        started = time.thread_time()
        for where, cursor in pages:
            page_body(store, where, cursor)
        rounds.append((time.thread_time() - started) / len(pages) * 1e3)
    return statistics.median(rounds)


def filtered_loads(ids: list[str]) -> dict[str, list[tuple[JobFilter, str | None]]]:
    """A page of each filter kind and of combinations, half at a random cursor."""
    kinds: dict[str, Any] = {
        "status": lambda i: JobFilter(status="SCHEDULED"),
        "tenant": lambda i: JobFilter(tenant=f"tenant{i % 20}"),
        "label": lambda i: JobFilter(labels=(("team", f"team{i % 50}"),)),
        "handler": lambda i: JobFilter(handler="bench.noop"),
        "status+tenant": lambda i: JobFilter(status="SCHEDULED", tenant=f"tenant{i % 20}"),
        "tenant+2 labels": lambda i: JobFilter(
            tenant=f"tenant{i % 20}", labels=(("team", f"team{i % 50}"), ("env", "dev"))
        ),
        "handler+label": lambda i: JobFilter(handler="bench.noop", labels=(("env", "dev"),)),
    }
    return {
        name: [
            (make(i), None if i % 2 else encode_cursor(random.choice(ids).encode()))
            for i in range(PAGES)
        ]
        for name, make in kinds.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--executions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    codec = Codec.from_directory()
    now_ms = time.time_ns() // 1_000_000
    jobs = job_values(codec, args.jobs, now_ms)
    ids = [key.decode() for key, _ in jobs]
    results = result_values(codec, ids, args.executions, now_ms)
    random.seed(1)
    with tempfile.TemporaryDirectory(prefix="kafkron-page-cpu-") as tmp:
        store = ViewStore(Path(tmp) / "view", codec, recent_executions=20)
        try:
            job_us = apply_us(store, jobs, "job")
            result_us = apply_us(store, results, "result")
            print(f"apply: {job_us:.1f} us per job, {result_us:.1f} us per result")
            loads: dict[str, list[tuple[JobFilter, str | None]]] = {
                "first page": [(JobFilter(), None)] * PAGES,
                "at a cursor": [
                    (JobFilter(), encode_cursor(random.choice(ids).encode())) for _ in range(PAGES)
                ],
                "tenant+label": [
                    (JobFilter(tenant=f"tenant{i % 20}", labels=(("team", f"team{i % 50}"),)), None)
                    for i in range(PAGES)
                ],
                **filtered_loads(ids),
            }
            for name, pages in loads.items():
                print(f"page {name}: {page_ms(store, pages, args.repeat):.3f} ms CPU")
        finally:
            store.close()


if __name__ == "__main__":
    main()
