"""The README's dashboard screenshot, taken again:

    KAFKA_BOOTSTRAP=127.0.0.1:9092 .venv/bin/python -m tests.services.ingest.dashboard_screenshot \\
        docs/img/dashboard.png

Starts a whole kafkron on the broker (``dashboard_cluster``), gives it the demo's jobs, a few
jobs every second or two and a dead letter, lets it run ``--run-s`` seconds so the plots
fill, and has Debian's Chromium take the overview page.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from services.demo import demo_jobs
from tests.services.ingest.dashboard_cluster import running_cluster
from tests.services.ingest.test_dashboard_browser import CHROMIUM, CHROMIUM_ARGS


def _jobs(now_ms: int, tag: str) -> list[dict[str, object]]:
    every = [
        ("billing-sync", "*/2 * * * * *", "finance"),
        ("cache-warm", "* * * * * *", "web"),
        ("metrics-rollup", "*/3 * * * * *", "data"),
        ("feed-poll", "* * * * * *", "web"),
    ]
    jobs: list[dict[str, object]] = [
        {"job_id": f"{name}-{tag}", "handler": "examples.noop", "tenant": tenant,
         "labels": {"team": tenant}, "cron": {"expression": cron, "timezone": "UTC"}}
        for name, cron, tenant in every
    ]  # fmt: skip
    jobs += [
        {"job_id": f"invoice-{n}-{tag}", "handler": "examples.flaky", "tenant": "finance",
         "run_at": now_ms + 5_000 + n * 7_000, "retry": {"max_attempts": 3, "initial_backoff_s": 1}}
        for n in range(8)
    ]  # fmt: skip
    jobs.append({"job_id": f"export-{tag}", "handler": "tests.fails_first", "tenant": "data",
                 "run_at": now_ms + 3_000, "retry": {"max_attempts": 1}})  # fmt: skip
    return [*jobs, *demo_jobs(now_ms, tag)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("png", type=Path)
    parser.add_argument("--run-s", type=float, default=150.0)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    bootstrap = os.environ.get("KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    with tempfile.TemporaryDirectory() as base, running_cluster(bootstrap, Path(base), 4) as c:
        tag = uuid.uuid4().hex[:4]
        for job in _jobs(time.time_ns() // 1_000_000, tag):
            httpx.post(f"{c.api_url}/api/jobs", json=job, timeout=30).raise_for_status()
        time.sleep(args.run_s)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 760})
            page.goto(f"{c.api_url}/ui/#/")
            page.wait_for_selector("svg.plot")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(args.png))
            browser.close()
    print(f"wrote {args.png} ({args.png.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
