"""Least privilege on a real broker with SASL/SCRAM and ACLs (issue 21).

A broker of this module's own (``infra/sasl.py``): a SASL_PLAINTEXT listener (SCRAM-SHA-512)
and the StandardAuthorizer, nothing allowed without an ACL. The admin (a super user,
created at format time) creates the topics, a SCRAM user per service and the ACLs
``kafkron acls`` derives; the timer, the executor, the dag processor and the API run as
child processes logged in as their users: a one-off written with the client library (as the
API's user) and a DAG created over the REST API run end to end (SUCCEEDED on job-results),
and the API's dashboard reads every group. Then one ACL goes missing and the service stops
with an error naming it. With ``--precreated-changelogs`` (no Create) a service stops until
the admin has created its changelogs, then they all run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from infra.broker import LocalBroker, free_port
from infra.sasl import sasl_acl_properties, sasl_client_config
from infra.settings import BrokerSettings
from services.cli import root as kafkron_cli
from services.dag.service import build_processor as build_dag_processor
from services.dag.settings import DagSettings
from services.executor.dedup import STORE_NAME as DEDUP_STORE
from services.executor.settings import ExecutorSettings
from services.ingest.client import KafkronClient
from services.ingest.settings import IngestSettings
from services.operator_cli.acls_command import service_rules
from services.timer.service import build_processor as build_timer_processor
from services.timer.settings import TimerSettings
from streams import clock
from streams.acls import Operation, without
from streams.admin import ensure_topics
from streams.codec import Codec, RecordKind
from streams.exceptions import KafkaDeliveryError
from streams.identity import execution_id
from streams.kafka.acl_admin import create_acls, delete_acls
from streams.settings import KafkaSettings
from streams.state.changelog import changelog_topic, ensure_changelog_topics
from streams.topics import Priority, TopicNames
from tests.conftest import ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
PARTITIONS = 2


@dataclass(frozen=True)
class SecuredBroker:
    sasl: str  # the SASL_PLAINTEXT listener's address


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    home = tmp_path_factory.mktemp("sasl-broker")
    port, controller_port, sasl_port = free_port(), free_port(), free_port()
    settings = BrokerSettings(
        home=home / "broker", libs_dir=ROOT / ".state" / "kafka-libs", port=port,
        controller_port=controller_port, heap_mb=512,
        extra_properties=sasl_acl_properties(port, controller_port, sasl_port, [ADMIN]),
        scram_users={ADMIN: ADMIN_PASSWORD},
    )  # fmt: skip
    broker = LocalBroker(settings)
    try:
        broker.start()
        yield SecuredBroker(sasl=f"127.0.0.1:{sasl_port}")
    finally:
        broker.stop()


def as_user(broker: SecuredBroker, user: str, namespace: str, state_dir: Path) -> KafkaSettings:
    return KafkaSettings(
        bootstrap_servers=broker.sasl, namespace=namespace, partitions=PARTITIONS,
        state_dir=state_dir, librdkafka=sasl_client_config(user, password(user)),
    )  # fmt: skip


def password(user: str) -> str:
    return ADMIN_PASSWORD if user == ADMIN else f"{user}-secret"


@pytest.fixture
def admin_kafka(secured_broker: SecuredBroker, tmp_path: Path) -> KafkaSettings:
    namespace = f"acl{uuid.uuid4().hex[:8]}."
    kafka = as_user(secured_broker, ADMIN, namespace, tmp_path / "admin-state")
    ensure_topics(kafka)  # the admin creates kafkron's topics
    return kafka


def add_user(admin: AdminClient, user: str) -> None:
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upsert = UserScramCredentialUpsertion(user, info, password(user).encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result()


class Services:
    """kafkron services as child processes, each logged in as its own user."""

    def __init__(self, broker: SecuredBroker, namespace: str, base: Path) -> None:
        self.broker, self.namespace, self.base = broker, namespace, base
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.http_port = free_port()

    def start(self, service: str, user: str, password_: str | None = None) -> None:
        login = sasl_client_config(user, password(user) if password_ is None else password_)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "KAFKRON_BOOTSTRAP_SERVERS": self.broker.sasl,
            "KAFKRON_NAMESPACE": self.namespace,
            "KAFKRON_PARTITIONS": str(PARTITIONS),
            "KAFKRON_STATE_DIR": str(self.base / user),
            "KAFKRON_LIBRDKAFKA": json.dumps(login),
            "KAFKRON_TIMER_INSTANCE_ID": user,
            "KAFKRON_EXECUTOR_WORKER_ID": user,
            "KAFKRON_DAG_INSTANCE_ID": user,
            "KAFKRON_TIMER_METRICS_PORT": "0",
            "KAFKRON_EXECUTOR_METRICS_PORT": "0",
            "KAFKRON_DAG_METRICS_PORT": "0",
            "KAFKRON_INGEST_METRICS_PORT": "0",
            "KAFKRON_INGEST_HTTP_PORT": str(self.http_port),
            "KAFKRON_EXECUTOR_COMMIT_INTERVAL_MS": "100",
            "KAFKRON_EXECUTOR_LOAD_ENTRY_POINTS": "false",
        }
        with self.log_path(user).open("ab") as log:
            self.processes[user] = subprocess.Popen(
                [sys.executable, "-m", "services.cli", service],
                env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def log_path(self, user: str) -> Path:
        return self.base / f"{user}.log"

    def log(self, user: str) -> str:
        path = self.log_path(user)
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_exit(self, user: str, timeout_s: float) -> int | None:
        try:
            return self.processes[user].wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, user: str) -> None:
        process = self.processes[user]
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop_all(self) -> None:
        for user in self.processes:
            self.stop(user)


class Outcomes:
    """Final statuses on job-results, read as the admin, committed records only."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self._codec = Codec.from_directory()
        self._consumer = Consumer(
            kafka.client_config(
                **{"group.id": f"acl-test-{uuid.uuid4().hex[:6]}",
                   "isolation.level": "read_committed", "enable.auto.commit": False},
            )
        )  # fmt: skip
        topic = TopicNames(kafka.namespace).job_results
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.statuses: dict[str, str] = {}

    def wait_for(self, execution: str, timeout_s: float) -> str | None:
        deadline = time.monotonic() + timeout_s
        while execution not in self.statuses and time.monotonic() < deadline:
            for message in self._consumer.consume(100, 0.2):
                value = message.value()
                if message.error() is None and value is not None:
                    result = self._codec.decode(RecordKind.EXECUTION_RESULT, value)
                    if result["status"] in ("SUCCEEDED", "DEAD_LETTER", "SKIPPED"):
                        self.statuses[result["execution_id"]] = result["status"]
        return self.statuses.get(execution)

    def close(self) -> None:
        self._consumer.close()


def http(services: Services, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One request to the API process; its status and JSON body (status 0: no answer)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{services.http_port}{path}", data=data, method=method,
        headers={"content-type": "application/json"},
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except OSError:
        return 0, None  # not listening yet


def wait_api_ready(services: Services, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if http(services, "GET", "/healthz")[0] == 200:
            return
        time.sleep(0.3)
    raise AssertionError(f"the API did not get ready\n{services.log('api')[-3000:]}")


def submit_one_off(kafka: KafkaSettings, view_dir: Path, job_id: str, in_ms: int) -> str:
    """Write a one-off job as ``kafka``'s user; its execution id."""
    run_at_ms = clock.now_ms() + in_ms
    with KafkronClient(IngestSettings(kafka=kafka, view_dir=view_dir)) as client:
        client.submit_many([{"job_id": job_id, "handler": "examples.noop", "run_at": run_at_ms}])
    return execution_id(job_id, run_at_ms)


def run_a_one_off_and_a_dag(
    services: Services, api: KafkaSettings, outcomes: Outcomes, view_dir: Path
) -> None:
    """A one-off written with the client library as the API's user and a DAG (a root and
    its child) created over the REST API: each SUCCEEDED on job-results within 45 s."""
    one_off = submit_one_off(api, view_dir, "one-off", 3_000)
    root_ms = (clock.now_ms() // 1000 + 3) * 1000
    root = {
        "job_id": "dag-root",
        "handler": "examples.noop",
        "catchup": "all",
        "cron": {"expression": "* * * * * *", "start": root_ms, "end": root_ms + 1},
    }
    child = {"job_id": "dag-child", "handler": "examples.noop", "depends_on": ["dag-root"]}
    for job in (root, child):
        status, body = http(services, "POST", "/api/jobs", job)
        assert status in (200, 201), (status, body)
    for execution in (
        one_off,
        execution_id("dag-root", root_ms),
        execution_id("dag-child", root_ms),
    ):
        logs = "".join(services.log(s)[-2000:] for s in services.processes)
        assert outcomes.wait_for(execution, 45) == "SUCCEEDED", (execution, logs)


def test_services_run_under_their_acls_and_a_missing_one_stops_them(
    secured_broker: SecuredBroker, admin_kafka: KafkaSettings, tmp_path: Path
) -> None:
    started = time.monotonic()
    namespace = admin_kafka.namespace
    admin = AdminClient(admin_kafka.client_config())
    every = ("timer", "executor", "dag", "api")
    rules = {s: service_rules(s, admin_kafka, False) for s in every}
    for user in (*rules, "bare-timer", "no-txn-dag"):
        add_user(admin, user)
    for service, service_acls in rules.items():
        if service != "api":
            create_acls(admin, service_acls, f"User:{service}")
    # The API's through the command, as an operator would (the admin's login from the env).
    applied = CliRunner().invoke(
        kafkron_cli,
        ["acls", "--service", "api", "--principal", "User:api", "--apply",
         "--bootstrap", secured_broker.sasl, "--namespace", namespace],
        env={"KAFKRON_LIBRDKAFKA": json.dumps(admin_kafka.librdkafka)},
    )  # fmt: skip
    assert applied.exit_code == 0, applied.output
    assert f"added {sum(len(r.operations) for r in rules['api'])} ACL bindings" in applied.output
    api = as_user(secured_broker, "api", namespace, tmp_path / "api")
    outcomes = Outcomes(admin_kafka)
    services = Services(secured_broker, namespace, tmp_path)
    try:
        for service in every:
            services.start(service, service)
        wait_api_ready(services, 60)
        run_a_one_off_and_a_dag(services, api, outcomes, tmp_path / "view")
        fired_s = time.monotonic() - started
        # A client whose user may not write jobs is told which ACL, not to retry.
        stranger = as_user(secured_broker, "executor", namespace, tmp_path / "stranger")
        with pytest.raises(KafkaDeliveryError, match="Write on each topic it produces to"):
            submit_one_off(stranger, tmp_path / "stranger-view", "not-allowed", 1_000)
        status, body = http(services, "GET", "/api/dashboard/partitions")
        assert status == 200 and len(body["groups"]) == 3, (status, body)
        assert all(g.get("error") is None and g["members"] for g in body["groups"]), body

        # The executor loses Write on job-results: its next result is refused, it stops.
        services.stop("executor")
        results = TopicNames(namespace).job_results
        kept = without(rules["executor"], results, Operation.WRITE)
        removed = [r for r in rules["executor"] if r not in kept]
        assert delete_acls(admin, removed, "User:executor") == 1
        services.start("executor", "executor")
        second = submit_one_off(api, tmp_path / "view", "write-denied", 1_000)
        code = services.wait_exit("executor", 45)
        log = services.log("executor")
        assert code is not None and code != 0, f"the executor kept running\n{log[-3000:]}"
        assert "TOPIC_AUTHORIZATION_FAILED" in log, log[-3000:]
        assert "Write on each topic it produces to" in log, log[-3000:]
        assert "kafkron acls --service" in log, log[-3000:]
        assert second not in outcomes.statuses

        # A timer without Read on its group (refused when it looks up its coordinator) and a
        # dag processor without Write on its transactional ids (refused at start) stop.
        bare = without(rules["timer"], f"{namespace}timer", Operation.READ)
        create_acls(admin, bare, "User:bare-timer")
        no_txn = without(rules["dag"], f"{namespace}dag.", Operation.WRITE)
        create_acls(admin, no_txn, "User:no-txn-dag")
        services.start("timer", "bare-timer")
        services.start("dag", "no-txn-dag")
        for user, code_name, named in (
            ("bare-timer", "GROUP_AUTHORIZATION_FAILED", "Read on its consumer group"),
            ("no-txn-dag", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "Write and Describe on the"),
        ):
            code = services.wait_exit(user, 45)
            log = services.log(user)
            assert code is not None and code != 0, f"{user} kept running\n{log[-3000:]}"
            assert code_name in log and named in log, log[-3000:]
    finally:
        services.stop_all()
        outcomes.close()
    for user in ("executor", "bare-timer", "no-txn-dag"):
        print(next(line for line in services.log(user).splitlines() if line.startswith("kafkron:")))
    print(
        f"under ACLs: a one-off and a DAG run SUCCEEDED {fired_s:.1f} s after the start; "
        f"the whole test {time.monotonic() - started:.1f} s"
    )


def test_a_failed_sasl_login_stops_the_service_with_what_to_check(
    secured_broker: SecuredBroker, admin_kafka: KafkaSettings, tmp_path: Path
) -> None:
    """A user whose password is wrong is refused at login; librdkafka would retry forever,
    the service stops at once and names the settings to check, not an ACL."""
    add_user(AdminClient(admin_kafka.client_config()), "timer")
    services = Services(secured_broker, admin_kafka.namespace, tmp_path)
    try:
        services.start("timer", "timer", password_="not-the-password")
        code = services.wait_exit("timer", 45)
        log = services.log("timer")
        assert code is not None and code != 0, f"the timer kept running\n{log[-3000:]}"
        assert "SASL authentication failed" in log or "Authentication with the broker" in log, log[
            -3000:
        ]
        assert "KAFKRON_LIBRDKAFKA" in log and "kafkron acls" not in log, log[-3000:]
    finally:
        services.stop_all()


def precreate_changelogs(admin_kafka: KafkaSettings) -> list[str]:
    """Create every processor's changelogs as the admin, as each service does at start,
    from the stores and inputs its own code opens (no store named here); their names."""
    timer = build_timer_processor(TimerSettings(kafka=admin_kafka))
    dag = build_dag_processor(DagSettings(kafka=admin_kafka))
    executor_group = ExecutorSettings(kafka=admin_kafka).group_id()
    due_topics = [TopicNames(admin_kafka.namespace).due(p) for p in Priority]
    stores = [
        (timer.group_id, list(timer._stores), timer.input_topics),
        (dag.group_id, list(dag._stores), dag.input_topics),
        (executor_group, [DEDUP_STORE], due_topics),
    ]
    for group, names, inputs in stores:
        ensure_changelog_topics(admin_kafka, group, names, inputs)
    return sorted(changelog_topic(admin_kafka, g, name) for g, names, _ in stores for name in names)


def changelog_topics(admin: AdminClient, namespace: str) -> list[str]:
    prefix = f"{namespace}changelog."
    return sorted(t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix))


def test_services_run_without_create_when_an_admin_precreated_their_changelogs(
    secured_broker: SecuredBroker, admin_kafka: KafkaSettings, tmp_path: Path
) -> None:
    """``kafkron acls --precreated-changelogs``: no Create at all. Before the admin creates
    the changelogs a timer under those ACLs stops, refused Create; after, every service
    runs a one-off and a DAG to SUCCEEDED, and the changelogs are the admin's."""
    started = time.monotonic()
    namespace = admin_kafka.namespace
    admin = AdminClient(admin_kafka.client_config())
    processors = ("timer", "executor", "dag")
    rules = {s: service_rules(s, admin_kafka, True) for s in processors}
    assert all(Operation.CREATE not in r.operations for s in processors for r in rules[s])
    assert any(Operation.CREATE in r.operations for r in service_rules("dag", admin_kafka, False))
    for user in (*processors, "api"):
        add_user(admin, user)
    for service in processors:  # through the command, as an operator would
        applied = CliRunner().invoke(
            kafkron_cli,
            ["acls", "--service", service, "--principal", f"User:{service}", "--apply",
             "--precreated-changelogs", "--bootstrap", secured_broker.sasl,
             "--namespace", namespace],
            env={"KAFKRON_LIBRDKAFKA": json.dumps(admin_kafka.librdkafka)},
        )  # fmt: skip
        added = sum(len(r.operations) for r in rules[service])
        assert applied.exit_code == 0 and f"added {added} ACL bindings" in applied.output, (
            applied.output
        )
    create_acls(admin, service_rules("api", admin_kafka, True), "User:api")
    api = as_user(secured_broker, "api", namespace, tmp_path / "api")
    outcomes = Outcomes(admin_kafka)
    services = Services(secured_broker, namespace, tmp_path)
    try:
        services.start("timer", "timer")
        code = services.wait_exit("timer", 45)
        log = services.log("timer")
        assert code is not None and code != 0, f"the timer ran without changelogs\n{log[-3000:]}"
        assert "creating changelog" in log and "(Create)" in log, log[-3000:]
        assert changelog_topics(admin, namespace) == []

        precreated = precreate_changelogs(admin_kafka)
        assert changelog_topics(admin, namespace) == precreated
        services.start("timer", "timer")
        for service in ("executor", "dag", "api"):
            services.start(service, service)
        wait_api_ready(services, 60)
        run_a_one_off_and_a_dag(services, api, outcomes, tmp_path / "view")
        for service in (*processors, "api"):
            assert services.processes[service].poll() is None, services.log(service)[-3000:]
        assert changelog_topics(admin, namespace) == precreated
    finally:
        services.stop_all()
        outcomes.close()
    print(
        f"precreated changelogs ({len(precreated)}): a one-off and a DAG run SUCCEEDED, the "
        f"whole test {time.monotonic() - started:.1f} s"
    )
