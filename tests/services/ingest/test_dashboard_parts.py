"""The dashboard's pure parts: next fires, partition rows, the service groups' names, and the
self-hosted API docs (no Kafka)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
from fastapi import FastAPI

from services.dag.settings import DagSettings
from services.executor.settings import ExecutorSettings
from services.ingest.api_docs import (
    ASSET_NAMES,
    ASSETS_URL,
    DOCS_CONTENT_SECURITY_POLICY,
    install_api_docs,
)
from services.ingest.dashboard import UI_DIR
from services.ingest.group_lag import SERVICE_GROUPS, GroupLag, Member, group_body, partition_rows
from services.ingest.next_fires import next_fires_ms
from services.timer.settings import TimerSettings
from streams.settings import KafkaSettings

NOW_MS = 1_800_000_000_000  # 2027-01-15T08:00:00Z, a whole minute
EXTERNAL = re.compile(
    r"(?:src|href|action)\s*=\s*[\"']?\s*(?:https?:)?//"  # an attribute loading from elsewhere
    r"|url\(\s*[\"']?\s*(?:https?:)?//"  # CSS
    r"|@import\s+[\"']?(?:https?:)?//",
    re.IGNORECASE,
)
"""What loads a resource from another site in HTML or CSS (also protocol-relative ``//``)."""


def cron_job(expression: str, status: str = "SCHEDULED", **cron: Any) -> dict[str, Any]:
    return {"job_id": "j", "status": status, "run_at_ms": None, "depends_on": [],
            "cron": {"expression": expression, "timezone": "UTC", "start_ms": None,
                     "end_ms": None, "fold_policy": "AUTO", **cron}}  # fmt: skip


def test_next_fires_are_the_cron_ticks_after_now() -> None:
    fires = next_fires_ms(cron_job("*/10 * * * * *"), [], NOW_MS + 1, 4)
    assert fires == [NOW_MS + 10_000, NOW_MS + 20_000, NOW_MS + 30_000, NOW_MS + 40_000]


def test_next_fires_follow_the_time_zone_and_stop_at_the_end() -> None:
    berlin = cron_job("0 2 * * *", timezone="Europe/Berlin", end_ms=NOW_MS + 2 * 86_400_000)
    fires = next_fires_ms(berlin, [], NOW_MS, 5)
    assert fires == [NOW_MS + 17 * 3_600_000, NOW_MS + 41 * 3_600_000]  # 02:00 CET = 01:00Z


def test_no_next_fires_unless_scheduled() -> None:
    assert next_fires_ms(cron_job("* * * * *", status="PAUSED"), [], NOW_MS, 3) == []
    assert next_fires_ms(cron_job("* * * * *", status="CANCELLED"), [], NOW_MS, 3) == []


def test_a_one_off_fires_once_until_it_ran_and_a_dependent_never_of_its_own() -> None:
    one_off = {"status": "SCHEDULED", "run_at_ms": NOW_MS + 5, "cron": None, "depends_on": []}
    assert next_fires_ms(one_off, [], NOW_MS, 3) == [NOW_MS + 5]
    ran = [{"scheduled_for_ms": NOW_MS + 5}]
    assert next_fires_ms(one_off, ran, NOW_MS + 10, 3) == []
    dependent = {"status": "SCHEDULED", "run_at_ms": None, "cron": None, "depends_on": ["a"]}
    assert next_fires_ms(dependent, [], NOW_MS, 3) == []


def test_partition_rows_join_owners_offsets_and_ends() -> None:
    members = [
        Member("timer-a", "/10.0.0.1", (("jobs", 0), ("jobs", 1))),
        Member("timer-b", "/10.0.0.2", (("jobs", 2),)),
    ]
    committed = {("jobs", 0): 40, ("jobs", 2): 7, ("retry", 3): 5}  # retry 3: nobody owns it
    ends = {("jobs", 0): 45, ("jobs", 1): 9, ("jobs", 2): 7, ("retry", 3): 8}
    rows = partition_rows(members, committed, ends)
    assert [(r["topic"], r["partition"], r["owner"], r["committed"], r["lag"]) for r in rows] == [
        ("jobs", 0, "timer-a", 40, 5),
        ("jobs", 1, "timer-a", None, None),  # nothing committed yet: lag unknown
        ("jobs", 2, "timer-b", 7, 0),
        ("retry", 3, None, 5, 3),
    ]
    body = group_body("timer", "kafkron.timer", "STABLE", members, rows)
    assert body["total_lag"] == 8
    assert body["members"] == [
        {"client_id": "timer-a", "host": "/10.0.0.1", "partitions": 2},
        {"client_id": "timer-b", "host": "/10.0.0.2", "partitions": 1},
    ]


def test_an_end_below_the_committed_offset_is_no_negative_lag() -> None:
    (row,) = partition_rows([], {("jobs", 0): 10}, {("jobs", 0): 9})
    assert row["lag"] == 0


def test_the_groups_are_named_as_the_services_name_theirs() -> None:
    kafka = KafkaSettings(namespace="ns.")
    ids = GroupLag(kafka).group_ids
    assert set(ids) == set(SERVICE_GROUPS)
    assert ids["timer"] == TimerSettings(kafka=kafka).group_id()
    assert ids["executor"] == ExecutorSettings(kafka=kafka).group_id()
    assert ids["dag"] == DagSettings(kafka=kafka).group_id()


def _get(app: FastAPI, url: str) -> httpx.Response:
    async def fetch() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as client:
            return await client.get(url)

    return asyncio.run(fetch())


def test_the_api_docs_load_their_files_from_the_api() -> None:
    app = FastAPI(docs_url=None, redoc_url=None)
    install_api_docs(app)
    for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        answer = _get(app, page)
        assert answer.status_code == 200, page
        assert "http://" not in answer.text and "https://" not in answer.text, page
        assert answer.headers["content-security-policy"] == DOCS_CONTENT_SECURITY_POLICY
    docs, redoc = _get(app, "/docs").text, _get(app, "/redoc").text
    assert f'src="{ASSETS_URL}/swagger-ui-bundle.js"' in docs
    assert f'href="{ASSETS_URL}/swagger-ui.css"' in docs
    assert '"validatorUrl": null' in docs  # no badge fetched from validator.swagger.io
    assert f'src="{ASSETS_URL}/redoc.standalone.js"' in redoc
    for name in ASSET_NAMES:
        answer = _get(app, f"{ASSETS_URL}/{name}")
        assert answer.status_code == 200 and len(answer.content) > 1000, name


def test_the_dashboard_files_reference_nothing_elsewhere() -> None:
    files = sorted(UI_DIR.iterdir())
    assert {f.suffix for f in files} == {".html", ".css", ".js", ".svg"}
    for path in files:
        text = path.read_text()
        assert not EXTERNAL.search(text), f"{path.name} loads something from elsewhere"
        # The only absolute URL is SVG's namespace, a name that is never fetched.
        others = set(re.findall(r"https?://[^\s\"'`)]+", text)) - {"http://www.w3.org/2000/svg"}
        assert not others, f"{path.name}: {others}"


def test_the_external_reference_check_finds_what_it_should() -> None:
    for html in (
        '<script src="https://cdn.example/x.js">',
        "<link href='//cdn.example/x.css'>",
        "body { background: url(https://cdn.example/a.png) }",
        '@import "https://fonts.example/css";',
    ):
        assert EXTERNAL.search(html), html
    assert not EXTERNAL.search('<script src="app.js"></script><a href="#/jobs">')
