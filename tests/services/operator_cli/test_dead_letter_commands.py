"""``kafkron dlq list | replay`` over Kafka, with ``--json`` parsed back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.services.operator_cli.conftest import Ran

pytestmark = pytest.mark.kafka

Kafkron = Callable[..., Ran]


def _dead_letters(kafkron: Kafkron) -> list[dict[str, Any]]:
    ran = kafkron("dlq", "list", "--json")
    assert ran.code == 0, ran
    body = ran.json()
    assert isinstance(body, dict)
    items: list[dict[str, Any]] = body["items"]
    return items


def test_a_dead_execution_is_listed_and_replayed(kafkron: Kafkron) -> None:
    job_id = f"cli-dead-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    submitted = kafkron("submit", "examples.fail", "--job-id", job_id, "--run-at", now)
    assert submitted.code == 0, submitted
    deadline = time.monotonic() + 60
    while True:
        mine = [
            row for row in _dead_letters(kafkron)
            if row["record"] and (row["record"]["execution"] or {}).get("job_id") == job_id
        ]  # fmt: skip
        if mine:
            break
        assert time.monotonic() < deadline, "no dead letter"
        time.sleep(0.5)
    (row,) = mine
    execution_id = row["record"]["execution"]["execution_id"]
    assert row["record"]["kind"] == "EXECUTION" and isinstance(row["offset"], int)
    listing = kafkron("dlq", "list")
    assert listing.code == 0, listing
    assert f"EXECUTION {execution_id} handler=examples.fail attempts=1" in listing.out
    replayed = kafkron("dlq", "replay", execution_id, "--json")
    assert replayed.code == 0, replayed
    event = replayed.json()
    assert isinstance(event, dict)
    assert event["execution_id"] == execution_id and event["trigger"] == "REPLAY"
    assert event["attempt"] == 1
    missing = kafkron("dlq", "replay", f"{job_id}-none@1")
    assert missing.code == 1 and "no dead execution" in missing.err, missing
