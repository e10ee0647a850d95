"""The read API over real runs: ``kafkron timer`` and ``kafkron executor`` as child processes
on a namespace of this module's own, the API in-process. A flaky job's attempts, a one-off
COMPLETED with its outcome, a dead letter replayed through the API, a backfill twice."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from services import commands
from services.ingest.settings import IngestSettings
from services.local_cluster import ServiceProcess
from services.readiness import wait_until_ready
from streams.admin import ensure_topics
from streams.identity import execution_id
from streams.settings import KafkaSettings
from tests.conftest import ROOT, _delete_topics
from tests.services.ingest.test_ingest_api import Http, iso, now_ms, serving

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def http(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    """Timer and executor processes and an in-process API on a fresh namespace."""
    base = tmp_path_factory.mktemp("flow")
    namespace = f"f{uuid.uuid4().hex[:10]}."
    kafka = KafkaSettings(
        bootstrap_servers=kafka_bootstrap, namespace=namespace, partitions=2,
        state_dir=base / "state",
    )  # fmt: skip
    ensure_topics(kafka)
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(ROOT),
        "KAFKRON_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "KAFKRON_NAMESPACE": namespace,
        "KAFKRON_PARTITIONS": "2",
        "KAFKRON_STATE_DIR": str(base / "state"),
        "KAFKRON_EXECUTOR_COMMIT_INTERVAL_MS": "100",
    }
    services = [
        ServiceProcess(name, [sys.executable, "-m", "services.cli", name])
        for name in ("timer", "executor")
    ]
    logs = [(base / f"{s.name}.log").open("ab") for s in services]
    try:
        for service, log in zip(services, logs, strict=True):
            service.process = subprocess.Popen(
                service.argv, env=env, cwd=ROOT, stdout=log, stderr=log
            )
        probes = {s.name: commands.READINESS[s.name](kafka, s.pid) for s in services}
        answers = wait_until_ready(probes, 120, lambda: not all(s.alive() for s in services))
        waiting = [f"{n}: {a.detail}" for n, a in answers.items() if not a.ready]
        assert not waiting, f"{waiting}\n{_logs(base)}"
        settings = IngestSettings(kafka=kafka, view_dir=base / "view", view_catch_up_timeout_s=20)
        with serving(settings) as client:
            yield client
    finally:
        for service in reversed(services):
            service.stop()
        for log in logs:
            log.close()
        _delete_topics(kafka_bootstrap, namespace)


def _logs(base: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in base.glob("*.log"))


def wait_for(read: Callable[[], Any], done: Callable[[Any], bool], what: str) -> Any:
    deadline = time.monotonic() + 60
    while True:
        found = read()
        if done(found):
            return found
        assert time.monotonic() < deadline, f"{what} not reached: {found}"
        time.sleep(0.2)


def create(http: Http, body: dict[str, Any]) -> str:
    answer = http.post("/api/jobs", json=body)
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["job_id"]
    return job_id


def job_of(http: Http, job_id: str) -> dict[str, Any]:
    body: dict[str, Any] = http.get(f"/api/jobs/{job_id}").json()
    return body


def test_a_flaky_one_off_shows_every_attempt_then_completes(http: Http) -> None:
    run_at = now_ms() + 500
    retry = {"max_attempts": 3, "initial_backoff_s": 0.2, "max_backoff_s": 0.2}
    job_id = create(http, {"handler": "examples.flaky", "run_at": run_at, "retry": retry})
    job = wait_for(lambda: job_of(http, job_id), lambda j: j["status"] == "COMPLETED", "COMPLETED")
    assert job["outcome"] == "SUCCEEDED"
    execution = http.get(f"/api/executions/{execution_id(job_id, run_at)}").json()
    attempts = execution["attempts"]
    assert [(a["attempt"], a["status"]) for a in attempts] == [(1, "FAILED"), (2, "SUCCEEDED")]
    failed, succeeded = attempts
    assert "the first attempt always fails" in failed["error"]
    assert failed["next_attempt_at"] is not None and failed["worker_id"]
    assert failed["started_at"] and failed["finished_at"] and succeeded["started_at"]
    assert succeeded["started_at"] >= failed["next_attempt_at"][:19]
    assert (execution["status"], execution["attempt"]) == ("SUCCEEDED", 2)
    listed = http.get(f"/api/jobs/{job_id}/executions").json()
    assert listed["items"] == [execution] and listed["next_cursor"] is None
    completed = http.get("/api/jobs", params={"status": "COMPLETED", "handler": "examples.flaky"})
    assert job_id in [i["job_id"] for i in completed.json()["items"]]


def test_a_dead_letter_is_replayed_through_the_api(http: Http) -> None:
    run_at = now_ms() + 300
    job_id = create(http, {"handler": "examples.fail", "run_at": run_at})
    job = wait_for(lambda: job_of(http, job_id), lambda j: j["status"] == "COMPLETED", "dead")
    assert job["outcome"] == "DEAD_LETTER"
    eid = execution_id(job_id, run_at)
    view = http.app.state.view
    wait_for(lambda: view.dead_letter_of(eid), lambda d: d is not None, "the dead letter")
    replayed = http.post(f"/api/dead-letter/{eid}/replay")
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["execution_id"] == eid and replayed.json()["trigger"] == "REPLAY"
    execution = wait_for(
        lambda: http.get(f"/api/executions/{eid}").json(),
        lambda e: len(e["attempts"]) == 2 and e["status"] == "DEAD_LETTER",
        "the replay's outcome",
    )
    assert [(a["attempt"], a["trigger"]) for a in execution["attempts"]] == [
        (1, "SCHEDULE"),
        (1, "REPLAY"),
    ]


def test_a_backfill_twice_runs_each_tick_once(http: Http) -> None:
    job_id = create(http, {"handler": "examples.noop", "cron": {"expression": "0 * * * *"}})
    start = (now_ms() // 3_600_000 - 10) * 3_600_000  # ten hours ago, on the hour
    window = {"from": start, "to": start + 2 * 3_600_000, "rate": 100}
    first = http.post(f"/api/jobs/{job_id}/backfill", json=window)
    assert first.status_code == 200 and first.json()["ticks"] == 3, first.text

    def backfilled() -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = http.get(f"/api/jobs/{job_id}/executions").json()["items"]
        return [e for e in items if e["trigger"] == "BACKFILL"]

    done = wait_for(backfilled, lambda es: [e["status"] for e in es] == ["SUCCEEDED"] * 3, "runs")
    assert [e["scheduled_for"] for e in done] == [iso(start + h * 3_600_000) for h in (2, 1, 0)]
    again = http.post(f"/api/jobs/{job_id}/backfill", json=window)
    assert again.status_code == 200
    time.sleep(3)
    repeated = backfilled()
    assert [e["execution_id"] for e in repeated] == [e["execution_id"] for e in done]
    assert all(len(e["attempts"]) == 1 for e in repeated), repeated
