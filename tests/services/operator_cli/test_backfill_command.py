"""``kafkron backfill``: a dry run lists the window's ticks, a backfill runs each once and
waits for their outcomes, the same backfill again runs nothing twice."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from streams.identity import execution_id
from tests.services.operator_cli.conftest import Ran

pytestmark = pytest.mark.kafka

Kafkron = Callable[..., Ran]


def _iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def test_backfill_dry_run_then_twice(kafkron: Kafkron) -> None:
    job_id = f"cli-backfill-{uuid.uuid4().hex[:8]}"
    submitted = kafkron("submit", "examples.noop", "--job-id", job_id, "--cron", "0 * * * *")
    assert submitted.code == 0, submitted
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    start, end = hour - timedelta(hours=6), hour - timedelta(hours=1)
    window = ["--from", _iso(start), "--to", _iso(end)]
    ticks = [int((start + timedelta(hours=h)).timestamp() * 1000) for h in range(6)]

    dry = kafkron("backfill", job_id, *window, "--dry-run", "--json")
    assert dry.code == 0, dry
    answer = dry.json()
    assert isinstance(answer, dict)
    assert answer["ticks"] == 6 and answer["dry_run"] is True
    assert [t["at_ms"] for t in answer["tick_times"]] == ticks
    table = kafkron("backfill", job_id, *window, "--dry-run")
    assert table.code == 0 and "6 tick(s) would run (dry run: nothing ran)" in table.out, table
    assert execution_id(job_id, ticks[0]) in table.out

    first = kafkron("backfill", job_id, *window, "--rate", "10", "--timeout-s", "90")
    assert first.code == 0, first
    assert "6 tick(s) accepted" in first.out and "final outcomes: 6 SUCCEEDED" in first.out
    for tick in ticks:
        shown = kafkron("history", "--execution", execution_id(job_id, tick), "--json")
        assert shown.code == 0, shown
        body = shown.json()
        assert isinstance(body, dict)
        attempts = body["attempts"]
        assert [a["status"] for a in attempts if a["status"] != "STARTED"] == ["SUCCEEDED"]
    again = kafkron("backfill", job_id, *window, "--timeout-s", "90")
    assert again.code == 0, again
    assert "final outcomes: 6 SUCCEEDED" in again.out
    for tick in ticks:  # still one run each: the executors' dedup ran none twice
        body = kafkron("history", "--execution", execution_id(job_id, tick), "--json").json()
        assert isinstance(body, dict)
        assert [a["status"] for a in body["attempts"]].count("SUCCEEDED") == 1, body


def test_backfill_of_an_unknown_job_is_refused(kafkron: Kafkron) -> None:
    ran = kafkron("backfill", "cli-nobody", "--from", "2026-01-01T00:00:00Z",
                  "--to", "2026-01-02T00:00:00Z", "--json")  # fmt: skip
    assert ran.code == 1, ran
    error = ran.json()
    assert isinstance(error, dict) and error["status_code"] == 404
