"""Every command line command with two tenants' tokens against an API with tokens.

Another tenant's job, execution or dead letter is refused exactly like a missing one (exit
1, status 404, the same message) and nothing changes: the owner reads the same job after.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services import cli
from services.ingest.settings import IngestSettings
from streams.api_tokens import add_token
from streams.identity import execution_id
from streams.records import ExecutionStatus
from tests.services.ingest.test_ingest_tenants import DEAD_TICK, TICK, dead_letter
from tests.services.ingest.test_ingest_view import Feeder
from tests.services.operator_cli.conftest import CliCluster, Ran, running_cli_cluster

pytestmark = pytest.mark.kafka

Kafkron = Callable[..., Ran]


@dataclass
class TenantCluster:
    cluster: CliCluster
    acme: str
    globex: str
    admin: str


@pytest.fixture(scope="module")
def tenant_cluster(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TenantCluster]:
    """The API alone (no timer or executor: nothing here needs a run), with tokens."""
    base = tmp_path_factory.mktemp("tenant-cluster")
    path = base / "tokens.json"
    tokens = [add_token(path, tenant)[0] for tenant in ("acme", "globex", None)]
    env = {"KAFKRON_INGEST_TOKENS_FILE": str(path)}
    with running_cli_cluster(kafka_bootstrap, base, ("api",), env) as cluster:
        yield TenantCluster(cluster, *tokens)


@pytest.fixture
def kafkron(
    tenant_cluster: TenantCluster,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> Kafkron:
    """``kafkron(token, *args)``: one command in-process with ``token`` in KAFKRON_TOKEN."""
    kafka = tenant_cluster.cluster.kafka
    monkeypatch.setenv("KAFKRON_API_URL", tenant_cluster.cluster.api_url)
    monkeypatch.setenv("KAFKRON_BOOTSTRAP_SERVERS", kafka.bootstrap_servers)
    monkeypatch.setenv("KAFKRON_NAMESPACE", kafka.namespace)
    monkeypatch.setenv("KAFKRON_PROFILE", str(tmp_path / "no-profile.json"))

    def run(token: str | None, *args: str) -> Ran:
        if token is None:
            monkeypatch.delenv("KAFKRON_TOKEN", raising=False)
        else:
            monkeypatch.setenv("KAFKRON_TOKEN", token)
        capsys.readouterr()
        code = cli.main(list(args))
        captured = capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    return run


def submitted(ran: Ran) -> str:
    assert ran.code == 0, ran.err
    answer = ran.json()
    assert isinstance(answer, dict)
    job_id: str = answer["job_id"]
    return job_id


def test_every_command_refuses_another_tenants_job_like_a_missing_one(
    kafkron: Kafkron, tenant_cluster: TenantCluster
) -> None:
    acme, globex, admin = tenant_cluster.acme, tenant_cluster.globex, tenant_cluster.admin
    job = submitted(kafkron(acme, "submit", "reports.nightly", "--cron", "0 3 * * *", "--json"))
    feeder = Feeder(IngestSettings(kafka=tenant_cluster.cluster.kafka))
    feeder.result(job, TICK, ExecutionStatus.SUCCEEDED)
    feeder.result(job, DEAD_TICK, ExecutionStatus.DEAD_LETTER)
    dead_letter(feeder, job, DEAD_TICK, "acme")
    feeder.flush()
    dead = execution_id(job, DEAD_TICK)
    # The view applies the results and the dead letter when it reads them from Kafka: wait
    # for both, so "nothing changed" below compares against the applied state.
    deadline = time.monotonic() + 30
    while True:
        before = kafkron(acme, "show", job, "--json").json()
        dead_letters = kafkron(acme, "dlq", "list", "--json").json()["items"]  # type: ignore[index]
        applied = len(before["recent_executions"]) == 2 and len(dead_letters) == 1  # type: ignore[index]
        if applied or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert applied, (before, dead_letters)
    window = ["--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T12:00:00Z"]
    commands = [
        ["show", "{id}"],
        ["history", "{id}"],
        ["history", "--execution", "{id}@" + str(TICK)],
        ["cancel", "{id}"],
        ["pause", "{id}"],
        ["resume", "{id}"],
        ["trigger", "{id}"],
        ["backfill", "{id}", *window, "--no-wait"],
        ["dlq", "replay", "{id}@" + str(DEAD_TICK)],
    ]
    missing = f"nope-{uuid.uuid4().hex[:8]}"
    for command in commands:
        args = [a.replace("{id}", job) for a in command]
        absent_args = [a.replace("{id}", missing) for a in command]
        foreign = kafkron(globex, *args, "--json")
        absent = kafkron(globex, *absent_args, "--json")
        assert (foreign.code, absent.code) == (1, 1), (command, foreign, absent)
        assert foreign.json() == {
            "error": absent.json()["error"].replace(missing, job),  # type: ignore[index]
            "status_code": 404,
        }, command
    # Nothing changed for the owner; the lists show each tenant its own.
    assert kafkron(acme, "show", job, "--json").json() == before
    listed = kafkron(globex, "list", "--all", "--json").json()
    assert job not in {i["job_id"] for i in listed["items"]}  # type: ignore[index]
    assert kafkron(globex, "list", "--tenant", "acme", "--json").json()["items"] == []  # type: ignore[index]
    assert kafkron(acme, "list", "--json").json()["items"][0]["job_id"] == job  # type: ignore[index]
    assert kafkron(globex, "dlq", "list", "--json").json() == {"items": []}
    mine = kafkron(acme, "dlq", "list", "--json").json()["items"]  # type: ignore[index]
    assert [i["execution_id"] for i in mine] == [dead]
    # A tenant creates only its own jobs.
    refused = kafkron(
        globex, "submit", "reports.nightly", "--cron", "0 3 * * *", "--tenant", "acme"
    )
    assert refused.code == 1 and "tenant" in refused.err and "(422)" in refused.err
    own = submitted(kafkron(globex, "submit", "reports.nightly", "--cron", "0 3 * * *", "--json"))
    assert kafkron(admin, "show", own, "--json").json()["tenant"] == "globex"  # type: ignore[index]
    # The owner and the admin are served by the same commands.
    assert kafkron(admin, "show", job).code == 0
    assert kafkron(acme, "history", "--execution", f"{job}@{TICK}").code == 0
    assert kafkron(acme, "pause", job).code == 0
    assert kafkron(admin, "resume", job).code == 0
    replayed = kafkron(acme, "dlq", "replay", dead, "--json")
    assert replayed.code == 0 and replayed.json()["execution_id"] == dead  # type: ignore[index]
    assert kafkron(acme, "cancel", job).code == 0


def test_without_a_token_the_commands_say_how_to_give_one(
    kafkron: Kafkron, tenant_cluster: TenantCluster
) -> None:
    ran = kafkron(None, "list")
    assert ran.code == 1
    assert "(401)" in ran.err and "give --token or KAFKRON_TOKEN" in ran.err
    wrong = kafkron("kfr_000000000000_wrong", "list", "--json")
    assert wrong.code == 1 and json.loads(wrong.out)["status_code"] == 401
    assert "from KAFKRON_TOKEN was refused" in json.loads(wrong.out)["error"]
    flag = kafkron(None, "list", "--token", tenant_cluster.globex, "--json")
    assert flag.code == 0, flag.err
