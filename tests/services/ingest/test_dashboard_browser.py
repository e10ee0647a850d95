"""The dashboard in a real browser (Debian's Chromium, driven by Playwright) against a real
kafkron: timer, dag processor, executor and API as processes on the session broker.

Skipped, saying why, only where ``/usr/bin/chromium`` is absent (``./dev`` installs it with
apt-get where it can). Every request the pages make is recorded: none may leave the API.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from streams.api_tokens import add_token
from tests.services.ingest.dashboard_cluster import Cluster, another_api, running_cluster

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
EXPECT_TIMEOUT_MS = 60_000

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason="no /usr/bin/chromium: install Debian's chromium (./dev does with apt-get)",
    ),
]


@pytest.fixture(scope="module")
def cluster(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(kafka_bootstrap, tmp_path_factory.mktemp("ui-cluster")) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=EXPECT_TIMEOUT_MS)  # runs, replays and refreshes take seconds
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


class Pages:
    """A browser page on the cluster's API that records every request and page error."""

    def __init__(self, page: Any, api_url: str) -> None:
        self.page, self.api_url = page, api_url
        self.requests: list[str] = []
        self.blocked: list[str] = []  # refused by the page's Content-Security-Policy
        self.errors: list[str] = []
        self.opened: list[str] = []
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("requestfailed", self._failed)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.set_default_timeout(EXPECT_TIMEOUT_MS)

    def _failed(self, request: Any) -> None:
        if "csp" in (request.failure or "").lower():
            self.blocked.append(request.url)

    def open(self, path: str) -> Any:
        self.opened.append(path)
        self.page.goto(f"{self.api_url}{path}")
        return self.page

    def elsewhere(self) -> list[str]:
        """Requests the pages made that were not to the API (data: and the API's blob: URLs
        are made by the page itself)."""
        own = (f"{self.api_url}/", "data:", f"blob:{self.api_url}/")
        return [u for u in self.requests if not u.startswith(own)]


@pytest.fixture
def pages(browser: Any, cluster: Cluster) -> Iterator[Pages]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    try:
        recorder = Pages(context.new_page(), cluster.api_url)
        yield recorder
        assert recorder.errors == [], recorder.errors
        elsewhere = recorder.elsewhere()
        # Nothing reached another site; only the docs' bundles even try (ReDoc's logo).
        assert [u for u in elsewhere if u not in recorder.blocked] == [], elsewhere
        if not {"/docs", "/redoc"} & set(recorder.opened):
            assert elsewhere == []
    finally:
        context.close()


def submit(cluster: Cluster, body: dict[str, Any]) -> str:
    answer = httpx.post(f"{cluster.api_url}/api/jobs", json=body, timeout=30)
    assert answer.status_code == 201, answer.text
    job_id: str = answer.json()["job_id"]
    return job_id


def soon_ms(seconds: float = 1.0) -> int:
    return time.time_ns() // 1_000_000 + int(seconds * 1000)


def wait_for(what: str, check: Any, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"no {what} within {timeout_s} s")


def test_the_jobs_list_shows_a_submitted_job(cluster: Cluster, pages: Pages) -> None:
    from playwright.sync_api import expect

    stem = f"ui-list-{uuid.uuid4().hex[:6]}"
    cron = {"expression": "0 3 * * *", "timezone": "Europe/Berlin"}
    job_id = submit(cluster, {"job_id": f"{stem}-a", "handler": "examples.noop", "cron": cron,
                              "tenant": "finance", "labels": {"team": "data"}})  # fmt: skip
    submit(cluster, {"job_id": f"{stem}-b", "handler": "examples.echo", "cron": cron})
    page = pages.open("/ui/#/jobs")
    page.fill("input[name=id_prefix]", stem)
    page.fill("input[name=label]", "team:data")
    page.click("#job-filters button[type=submit]")
    rows = page.locator("table.jobs tbody tr")
    expect(rows).to_have_count(1)
    row = rows.first
    expect(row).to_have_attribute("data-job-id", job_id)
    expect(row).to_contain_text("SCHEDULED")
    expect(row).to_contain_text("0 3 * * * (Europe/Berlin)")
    expect(row).to_contain_text("team:data")
    row.get_by_role("link", name=job_id).click()
    expect(page.locator("h1")).to_contain_text(job_id)
    expect(page.locator("ol.plain li")).to_have_count(5)  # its next five fires


def test_a_job_page_shows_every_attempt(cluster: Cluster, pages: Pages) -> None:
    from playwright.sync_api import expect

    job_id = submit(cluster, {"handler": "examples.flaky", "run_at": soon_ms(),
                              "retry": {"max_attempts": 3, "initial_backoff_s": 0.2}})  # fmt: skip
    page = pages.open(f"/ui/#/job/{job_id}")
    execution = page.locator("table.executions tbody tr").first  # refreshed every 2 s
    expect(execution).to_have_attribute("data-status", "SUCCEEDED")
    attempts = execution.locator("tr.attempt")
    expect(attempts).to_have_count(2)
    expect(attempts.nth(0)).to_have_attribute("data-status", "FAILED")
    expect(attempts.nth(0)).to_contain_text("the first attempt always fails")
    expect(attempts.nth(1)).to_have_attribute("data-status", "SUCCEEDED")
    expect(attempts.nth(1)).to_contain_text("RETRY")
    expect(page.locator("h1")).to_contain_text("COMPLETED")


def test_a_dead_letters_replay_clicked_in_the_browser_ends_in_succeeded(
    cluster: Cluster, pages: Pages
) -> None:
    from playwright.sync_api import expect

    job_id = submit(cluster, {"handler": "tests.fails_first", "run_at": soon_ms(),
                              "retry": {"max_attempts": 1}})  # fmt: skip

    def dead_letter() -> str | None:
        items = httpx.get(f"{cluster.api_url}/api/dead-letter", params={"limit": 100}).json()
        found = [i["execution_id"] for i in items["items"] if i["job_id"] == job_id]
        return found[0] if found else None

    execution_id = wait_for("dead letter", dead_letter)
    page = pages.open("/ui/#/dead-letters")
    row = page.locator(f'tr.dead-letter[data-execution-id="{execution_id}"]')
    now = row.locator("td.now")
    expect(now).to_have_attribute("data-status", "DEAD_LETTER")
    row.get_by_role("button", name="Replay").click()
    expect(now).to_have_attribute("data-status", "SUCCEEDED")
    expect(now).to_have_attribute("data-trigger", "REPLAY")
    execution = httpx.get(f"{cluster.api_url}/api/executions/{execution_id}").json()
    assert (execution["status"], execution["trigger"]) == ("SUCCEEDED", "REPLAY")
    assert [a["status"] for a in execution["attempts"]] == ["DEAD_LETTER", "SUCCEEDED"]


def test_a_dag_runs_graph_shows_its_nodes_states(cluster: Cluster, pages: Pages) -> None:
    from playwright.sync_api import expect

    stem = f"ui-dag-{uuid.uuid4().hex[:6]}"
    run_at = soon_ms(2)
    root = submit(cluster, {"job_id": f"{stem}-root", "handler": "examples.noop", "run_at": run_at})
    child = submit(cluster, {"job_id": f"{stem}-child", "handler": "examples.noop",
                             "depends_on": [root]})  # fmt: skip
    page = pages.open(f"/ui/#/dag/{root}/{run_at}")
    graph = page.locator("svg.dag")
    expect(graph.locator(f'a.node[data-job-id="{root}"]')).to_have_attribute(
        "data-status", "SUCCEEDED"
    )
    expect(graph.locator(f'a.node[data-job-id="{child}"]')).to_have_attribute(
        "data-status", "SUCCEEDED"
    )
    expect(graph.locator("path.edge")).to_have_count(1)


def test_the_live_and_partitions_pages_show_the_running_services(
    cluster: Cluster, pages: Pages
) -> None:
    from playwright.sync_api import expect

    submit(cluster, {"handler": "examples.noop", "run_at": soon_ms()})
    page = pages.open("/ui/#/live")
    expect(page.locator("figure.plot-box")).to_have_count(2)
    succeeded = page.locator("svg.plot").first.locator(".c-ok")  # a line or a lone second's dot
    expect(succeeded.first).to_be_attached()
    page = pages.open("/ui/#/partitions")
    for name in ("timer", "dag", "executor"):
        group = page.locator(f'section.group[data-group="{name}"]')
        expect(group).to_contain_text("STABLE")
        expect(group.locator("tbody tr")).to_have_count(cluster.kafka.partitions)
        expect(group.locator("tbody tr").first).to_contain_text(f"{name}-")  # its worker id


def test_the_api_docs_render_with_nothing_from_elsewhere(pages: Pages) -> None:
    from playwright.sync_api import expect

    page = pages.open("/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("kafkron")
    expect(page.locator(".opblock-summary-path").first).to_be_visible()
    page = pages.open("/redoc")
    expect(page.locator("h1").first).to_contain_text("kafkron")
    page = pages.open("/")  # the API's root leads to the dashboard
    expect(page.locator("header .brand")).to_have_text("kafkron")
    assert page.url.endswith("/ui/")


def test_with_api_tokens_the_pages_ask_for_one_and_show_its_tenants_jobs(
    cluster: Cluster, browser: Any, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    tokens = tmp_path / "tokens.json"
    admin, _ = add_token(tokens, None, "dashboard test: admin")
    acme, _ = add_token(tokens, "acme", "dashboard test: acme")
    stem = f"ui-tok-{uuid.uuid4().hex[:6]}"
    cron = {"expression": "0 3 * * *"}
    for tenant in ("acme", "other"):
        submit(cluster, {"job_id": f"{stem}-{tenant}", "handler": "examples.noop",
                         "tenant": tenant, "cron": cron})  # fmt: skip
    with another_api(cluster, tmp_path / "view", KAFKRON_INGEST_TOKENS_FILE=str(tokens)) as url:
        context = browser.new_context()
        try:
            pages = Pages(context.new_page(), url)
            page = pages.open(f"/ui/#/jobs?id_prefix={stem}")
            bar = page.locator("#token-bar")
            expect(bar).to_be_visible()  # the list answered 401
            bar.locator("input").fill(acme)
            bar.get_by_role("button").click()
            rows = page.locator("table.jobs tbody tr")
            expect(rows).to_have_count(1)
            expect(rows.first).to_have_attribute("data-job-id", f"{stem}-acme")
            pages.open("/ui/#/live")
            expect(page.locator("main .error")).to_contain_text("403")  # admin tokens only
            page.evaluate("token => localStorage.setItem('kafkron.token', token)", admin)
            pages.open(f"/ui/#/jobs?id_prefix={stem}")
            expect(page.locator("table.jobs tbody tr")).to_have_count(2)
            assert pages.errors == [] and pages.elsewhere() == []
        finally:
            context.close()
