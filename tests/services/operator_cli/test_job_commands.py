"""``kafkron submit | show | list | history | cancel | pause | resume | trigger`` against a
running API (timer, executor and API as child processes, tests/services/operator_cli/
conftest.py): ``--json`` parsed back, the exit codes 0 (done), 1 (refused) and 2 (usage)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.services.operator_cli.conftest import Ran

pytestmark = pytest.mark.kafka

Kafkron = Callable[..., Ran]
FINAL = {"SUCCEEDED", "DEAD_LETTER", "SKIPPED", "MISSED", "CANCELLED", "UPSTREAM_FAILED"}


def _id(tag: str) -> str:
    return f"cli-{tag}-{uuid.uuid4().hex[:8]}"


def _in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def _submit(kafkron: Kafkron, *args: str) -> dict[str, Any]:
    ran = kafkron("submit", *args, "--json")
    assert ran.code == 0, ran
    body = ran.json()
    assert isinstance(body, dict)
    return body


def _wait_json(kafkron: Kafkron, args: list[str], done: Callable[[Any], bool], what: str) -> Any:
    deadline = time.monotonic() + 60
    while True:
        ran = kafkron(*args, "--json")
        if ran.code == 0 and done(ran.json()):
            return ran.json()
        assert time.monotonic() < deadline, f"{what}: {ran}"
        time.sleep(0.5)


def test_submit_then_show_as_json_and_as_a_table(kafkron: Kafkron) -> None:
    job_id = _id("show")
    answer = _submit(
        kafkron, "examples.echo", "--job-id", job_id, "--cron", "0 3 * * *",
        "--timezone", "Europe/Berlin", "--payload", '{"team": "a"}', "--label", "env=test",
        "--tenant", "acme", "--priority", "high",
    )  # fmt: skip
    assert answer["job_id"] == job_id and answer["status"] == "SCHEDULED" and answer["created"]
    shown = kafkron("show", job_id, "--json")
    assert shown.code == 0, shown
    job = shown.json()
    assert isinstance(job, dict)
    assert job["handler"] == "examples.echo" and job["payload"] == {"team": "a"}
    assert job["cron"]["expression"] == "0 3 * * *"
    assert job["cron"]["timezone"] == "Europe/Berlin"
    assert (job["tenant"], job["labels"], job["priority"]) == ("acme", {"env": "test"}, "HIGH")
    table = kafkron("show", job_id)
    assert table.code == 0, table
    assert "cron 0 3 * * * (Europe/Berlin)" in table.out
    assert "next run" in table.out and "(in " in table.out  # a human time, in the future


def test_idempotent_submit_says_it_was_a_repeat(kafkron: Kafkron) -> None:
    key = uuid.uuid4().hex
    run_at = _in(3600)
    first = _submit(kafkron, "examples.noop", "--run-at", run_at, "--idempotency-key", key)
    again = _submit(kafkron, "examples.noop", "--run-at", run_at, "--idempotency-key", key)
    assert first["created"] and not again["created"]
    assert again["job_id"] == first["job_id"]
    other = kafkron("submit", "examples.echo", "--run-at", run_at, "--idempotency-key", key)
    assert other.code == 1 and "already used with another request" in other.err, other


def test_pause_resume_trigger_cancel(kafkron: Kafkron) -> None:
    job_id = _id("steer")
    _submit(kafkron, "examples.noop", "--job-id", job_id, "--cron", "0 3 * * *")
    for command, status in (("pause", "PAUSED"), ("resume", "SCHEDULED")):
        ran = kafkron(command, job_id, "--json")
        assert ran.code == 0, ran
        assert ran.json() == {"job_id": job_id, "status": status}
    triggered = kafkron("trigger", job_id)
    assert triggered.code == 0, triggered
    assert triggered.out.startswith(f"job {job_id}: SCHEDULED, fires ")
    cancelled = kafkron("cancel", job_id, "--json")
    assert cancelled.code == 0, cancelled
    answer = cancelled.json()
    assert isinstance(answer, dict) and answer["status"] == "CANCELLED", cancelled
    # Refused with its reason: exit 1, the reason on stderr, {"error"} with --json.
    refused = kafkron("resume", job_id, "--json")
    assert refused.code == 1, refused
    error = refused.json()
    assert isinstance(error, dict) and error["status_code"] == 409, error
    assert "cancel" in error["error"].lower()
    assert refused.err.startswith("kafkron: ")


def test_refusals_exit_1_with_the_reason(kafkron: Kafkron) -> None:
    unknown = kafkron("show", _id("nobody"))
    assert unknown.code == 1 and "is not known" in unknown.err, unknown
    invalid = kafkron("submit", "Not A Handler", "--run-at", _in(60))
    assert invalid.code == 1, invalid
    assert "invalid request (422): handler:" in invalid.err
    unreachable = kafkron("show", "x", "--api", "http://127.0.0.1:9")
    assert (
        unreachable.code == 1
        and "cannot reach the kafkron API at http://127.0.0.1:9 (from --api)" in unreachable.err
    )


@pytest.mark.parametrize(
    "args",
    [
        ["nonsense"],
        ["submit", "--priority", "URGENT", "examples.noop"],
        ["submit", "--run-at", "2030-01-01T00:00:00Z"],  # no handler
        ["submit", "examples.noop", "--payload", "{not json"],
        ["submit", "examples.noop", "--label", "no-equals-sign"],
        ["show"],
        ["list", "--limit", "0"],
        ["list", "--status", "DONE"],
        ["history"],
        ["history", "job", "--execution", "job@1"],
        ["backfill", "job", "--from", "2026-01-01T00:00:00Z"],
    ],
)
def test_usage_errors_exit_2(kafkron: Kafkron, args: list[str]) -> None:
    ran = kafkron(*args)
    assert ran.code == 2, ran
    assert "Usage:" in ran.err or "Error:" in ran.err, ran


def test_list_filters_and_pages(kafkron: Kafkron) -> None:
    tenant = f"t{uuid.uuid4().hex[:8]}"
    ids = sorted(_id(f"list{i}") for i in range(5))
    for job_id in ids:
        _submit(kafkron, "examples.noop", "--job-id", job_id, "--cron", "0 3 * * *",
                "--tenant", tenant, "--label", "team=a")  # fmt: skip
    _submit(kafkron, "examples.noop", "--cron", "0 3 * * *", "--tenant", tenant,
            "--label", "team=b")  # fmt: skip
    every = kafkron("list", "--tenant", tenant, "--label", "team=a", "--all", "--limit", "2",
                    "--json")  # fmt: skip
    assert every.code == 0, every
    listing = every.json()
    assert isinstance(listing, dict)
    assert sorted(j["job_id"] for j in listing["items"]) == ids
    assert listing["next_cursor"] is None
    page = kafkron("list", "--tenant", tenant, "--limit", "2", "--json")
    assert page.code == 0, page
    first = page.json()
    assert isinstance(first, dict) and len(first["items"]) == 2 and first["next_cursor"]
    table = kafkron("list", "--tenant", tenant, "--label", "team=a")
    assert table.code == 0, table
    assert "5 job(s)" in table.out and all(job_id in table.out for job_id in ids)


def test_history_of_a_flaky_one_off_shows_every_attempt(kafkron: Kafkron) -> None:
    job_id = _id("flaky")
    _submit(kafkron, "examples.flaky", "--job-id", job_id, "--run-at", _in(0.5),
            "--max-attempts", "3")  # fmt: skip
    listing = _wait_json(
        kafkron, ["history", job_id],
        lambda body: any(e["status"] == "SUCCEEDED" for e in body["items"]), "the run",
    )  # fmt: skip
    (execution_id,) = {e["execution_id"] for e in listing["items"]}
    attempts = kafkron("history", "--execution", execution_id, "--json")
    assert attempts.code == 0, attempts
    body = attempts.json()
    assert isinstance(body, dict)
    statuses = [a["status"] for a in body["attempts"]]
    assert "FAILED" in statuses and statuses[-1] == "SUCCEEDED", body
    table = kafkron("history", job_id)
    assert table.code == 0 and execution_id in table.out and "SUCCEEDED" in table.out, table


def test_submit_a_job_file_with_flags_over_it(kafkron: Kafkron, tmp_path: Path) -> None:
    job_id = _id("file")
    cron = {"expression": "0 4 * * *", "timezone": "UTC"}
    job = {"job_id": job_id, "handler": "examples.noop", "tenant": "from-file", "cron": cron,
           "labels": {"a": "1"}}  # fmt: skip
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    answer = _submit(kafkron, "--file", str(path), "--tenant", "from-flag", "--label", "b=2")
    assert answer["job_id"] == job_id
    shown = kafkron("show", job_id, "--json").json()
    assert isinstance(shown, dict)
    assert shown["tenant"] == "from-flag" and shown["labels"] == {"a": "1", "b": "2"}
    assert shown["cron"]["expression"] == "0 4 * * *"
    missing = kafkron("submit", "--file", str(tmp_path / "none.json"))
    assert missing.code == 2 and "does not exist" in missing.err, missing
