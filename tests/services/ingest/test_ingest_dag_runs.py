"""DAG runs as the API shows them, from results on ``job-results`` (real broker)."""

from __future__ import annotations

from typing import Any

import pytest

from services.ingest.settings import IngestSettings
from services.ingest.view import StatusView
from streams.records import ExecutionStatus
from tests.services.ingest.test_ingest_api import Http, http, iso, view_of
from tests.services.ingest.test_ingest_dag_checks import created, dependent, feed_job, root
from tests.services.ingest.test_ingest_view import Feeder, eventually, view

pytestmark = pytest.mark.kafka

__all__ = ["http", "view"]  # fixtures of test_ingest_api and test_ingest_view

S, STARTED, DEAD = ExecutionStatus.SUCCEEDED, ExecutionStatus.STARTED, ExecutionStatus.DEAD_LETTER
K1, K2, K3 = 1_900_000_000_000, 1_900_000_300_000, 1_900_000_600_000


def six_node_dag(http: Http) -> None:
    """The design's pipeline: extract and load-refs on one cron, join, transform and
    validate, publish."""
    created(http, root("extract", cron={"expression": "*/5 * * * *"}))
    created(http, root("load-refs", cron={"expression": "*/5 * * * *"}))
    created(http, dependent("extract", "load-refs", job_id="join"))
    created(http, dependent("join", job_id="transform"))
    created(http, dependent("join", job_id="validate"))
    created(http, dependent("transform", "validate", job_id="publish"))


def results_seen(http: Http, job_id: str, count: int) -> None:
    eventually(lambda: len(view_of(http).executions(job_id)) >= count)


def brief(entries: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["execution_id"], e["status"]) for e in entries]


def test_a_dependent_shows_its_recent_runs(http: Http, ingest_settings: IngestSettings) -> None:
    six_node_dag(http)
    feeder = Feeder(ingest_settings)
    feeder.result("extract", K1, S)
    feeder.result("load-refs", K1, STARTED)
    feeder.result("extract", K2, DEAD, reason="retries exhausted")
    feeder.result("load-refs", K2, S)
    feeder.result("join", K2, ExecutionStatus.UPSTREAM_FAILED, reason="extract@... dead")
    for job_id in ("extract", "load-refs", "join"):
        feeder.result(job_id, K3, S)
    feeder.flush()
    results_seen(http, "join", 2)
    results_seen(http, "extract", 3)
    results_seen(http, "load-refs", 3)
    join = http.get("/api/jobs/join").json()
    runs = join["dag_runs"]
    assert join["dag_state"] == {"run_key": iso(K3), "status": "SUCCEEDED"}  # the newest run
    assert join["status"] == "SCHEDULED"
    assert [(r["run_key_ms"], r["run_key"], r["status"]) for r in runs] == [
        (K3, iso(K3), "SUCCEEDED"),
        (K2, iso(K2), "UPSTREAM_FAILED"),
        (K1, iso(K1), "WAITING"),
    ]
    newest, failed, waiting = runs
    assert brief(newest["succeeded"]) == [(f"extract@{K3}", "SUCCEEDED"),
                                          (f"load-refs@{K3}", "SUCCEEDED")]  # fmt: skip
    assert newest["awaited"] == newest["failed"] == []
    assert failed["execution_id"] == f"join@{K2}"
    assert brief(failed["failed"]) == [(f"extract@{K2}", "DEAD_LETTER")]
    assert failed["failed"][0]["reason"] == "retries exhausted"
    assert brief(failed["succeeded"]) == [(f"load-refs@{K2}", "SUCCEEDED")]
    assert brief(waiting["succeeded"]) == [(f"extract@{K1}", "SUCCEEDED")]
    assert brief(waiting["awaited"]) == [(f"load-refs@{K1}", "STARTED")]
    # publish's runs come from its roots' ticks, before its own upstreams ran at all.
    publish_runs = http.get("/api/jobs/publish").json()["dag_runs"]
    assert [r["run_key_ms"] for r in publish_runs] == [K3, K2, K1]
    publish = http.get("/api/jobs/publish").json()
    assert publish["dag_state"] == {"run_key": iso(K3), "status": "WAITING"}
    assert brief(publish_runs[0]["awaited"]) == [(f"transform@{K3}", "WAITING"),
                                                 (f"validate@{K3}", "WAITING")]  # fmt: skip
    extract = http.get("/api/jobs/extract").json()
    assert (extract["dag_runs"], extract["dag_state"]) == ([], None)


def test_a_dag_run_lists_every_node_upstreams_first(
    http: Http, ingest_settings: IngestSettings
) -> None:
    six_node_dag(http)
    feeder = Feeder(ingest_settings)
    for job_id in ("extract", "load-refs", "join", "transform"):
        feeder.result(job_id, K1, S)
    feeder.result("validate", K1, STARTED)
    feeder.result("extract", K2, S)  # another run never mixes in
    feeder.flush()
    results_seen(http, "validate", 1)
    results_seen(http, "extract", 2)
    answer = http.get(f"/api/dag-runs/extract/{K1}")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["root_job_id"], body["run_key_ms"], body["run_key"]) == ("extract", K1, iso(K1))
    assert body["truncated"] is False
    nodes = {n["job_id"]: n for n in body["nodes"]}
    assert [n["job_id"] for n in body["nodes"]] == [
        "extract", "join", "transform", "validate", "publish"
    ]  # fmt: skip
    assert {name: n["status"] for name, n in nodes.items()} == {
        "extract": "SUCCEEDED",
        "join": "SUCCEEDED",
        "transform": "SUCCEEDED",
        "validate": "STARTED",
        "publish": "WAITING",
    }
    assert nodes["publish"]["execution_id"] == f"publish@{K1}"
    assert brief(nodes["publish"]["upstreams"]) == [(f"transform@{K1}", "SUCCEEDED"),
                                                    (f"validate@{K1}", "STARTED")]  # fmt: skip
    assert brief(nodes["join"]["upstreams"]) == [(f"extract@{K1}", "SUCCEEDED"),
                                                 (f"load-refs@{K1}", "SUCCEEDED")]  # fmt: skip
    assert nodes["extract"]["upstreams"] == []
    later = http.get(f"/api/dag-runs/load-refs/{K2}").json()["nodes"]
    assert [(n["job_id"], n["status"]) for n in later][:2] == [("load-refs", "WAITING"),
                                                              ("join", "WAITING")]  # fmt: skip
    assert brief(later[1]["upstreams"]) == [(f"extract@{K2}", "SUCCEEDED"),
                                            (f"load-refs@{K2}", "WAITING")]  # fmt: skip


def test_dag_run_errors_name_the_root_or_the_field(http: Http) -> None:
    six_node_dag(http)
    unknown = http.get(f"/api/dag-runs/nobody/{K1}")
    assert unknown.status_code == 404 and "nobody" in unknown.json()["detail"]
    not_root = http.get(f"/api/dag-runs/join/{K1}")
    assert not_root.status_code == 422
    (error,) = not_root.json()["detail"]
    assert error["loc"] == ["path", "root_job_id"] and "not a root" in error["msg"]
    for bad in ("soon", "1.5", "-1"):
        answer = http.get(f"/api/dag-runs/extract/{bad}")
        assert answer.status_code == 422, bad
        assert [e["loc"] for e in answer.json()["detail"]] == [["path", "run_key_ms"]]


def test_the_reverse_index_follows_updates_and_tombstones(
    view: StatusView, ingest_settings: IngestSettings
) -> None:
    feeder = Feeder(ingest_settings)
    feed_job(feeder, "up-1")
    feed_job(feeder, "up-2")
    feed_job(feeder, "child", depends_on=["up-1"])
    feed_job(feeder, "other", depends_on=["up-1", "up-2"])
    feeder.flush()
    eventually(lambda: view.dependents("up-1", 10) == ["child", "other"])
    feed_job(feeder, "child", version=2, depends_on=["up-2"])
    feed_job(feeder, "other", version=3, depends_on=["up-1"])
    feed_job(feeder, "other", version=2, depends_on=["up-2"])  # stale: changes nothing
    feeder.send(feeder.names.jobs, "up-1", None)
    feeder.flush()
    eventually(lambda: view.dependents("up-2", 10) == ["child"])
    assert view.dependents("up-1", 10) == ["other"]  # its edges are the dependent's
    assert view.dependents("up-1", 0) == []
    feeder.send(feeder.names.jobs, "other", None)
    feed_job(feeder, "child", version=3, cron={"expression": "* * * * *", "timezone": "UTC"})
    feeder.flush()
    eventually(lambda: view.dependents("up-1", 10) == view.dependents("up-2", 10) == [])
