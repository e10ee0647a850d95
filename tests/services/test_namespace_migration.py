"""Growing partitions (issue 20): ``kafkron migrate`` moves every job of a namespace with 2
partitions to one with 4 while both run, on the real broker. Every tick of every recurring
job, every one-off and every DAG run fires exactly once across the two namespaces: the
ticks before the cut-over in the old one, the rest in the new one. A cut the old timers do
not apply in time is rolled back, and the old namespace then fires every tick itself."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.fleet import (
    Fleet,
    Ledger,
    cron_every_second,
    executions,
    one_off,
    ticks,
    whole_second_ms,
)
from services import cli
from services.ingest.client import KafkronClient
from services.ingest.settings import IngestSettings
from streams.admin import ensure_topics
from streams.codec import RecordKind
from streams.migration.jobs_topic import end_offsets, read_range
from streams.migration.progress import MigrationState, Phase
from streams.settings import KafkaSettings
from streams.topics import TopicNames

from .executor.test_service_kit import CODEC, now_ms

pytestmark = pytest.mark.kafka

SPAN_MS = 24_000


@pytest.fixture
def old(kafka_settings: KafkaSettings) -> KafkaSettings:
    settings = kafka_settings.model_copy(update={"partitions": 2})
    ensure_topics(settings)
    return settings


@pytest.fixture
def new(old: KafkaSettings) -> KafkaSettings:
    """The new namespace: under the old one's prefix, so the test's cleanup deletes it too."""
    return old.model_copy(update={"namespace": f"{old.namespace}v2.", "partitions": 4})


@pytest.fixture
def fleets(old: KafkaSettings, new: KafkaSettings, tmp_path: Path) -> Iterator[list[Fleet]]:
    both = [Fleet(old, tmp_path, "old"), Fleet(new, tmp_path, "new")]
    yield both
    for fleet in both:
        fleet.stop()


def migrate(old: KafkaSettings, new: KafkaSettings, work_dir: Path, *extra: str) -> int:
    return cli.main(
        ["migrate", "--bootstrap", old.bootstrap_servers, "--namespace", old.namespace,
         "--to-namespace", new.namespace, "--partitions", str(new.partitions),
         "--work-dir", str(work_dir), *extra]
    )  # fmt: skip


def submit(old: KafkaSettings, view_dir: Path, first_ms: int) -> dict[str, Any]:
    """Recurring jobs (one paused), one-offs, a DAG and two jobs that never fire in the test
    (cancelled, an hour later); returns the expected fires by job."""
    end_ms = first_ms + SPAN_MS
    every = list(ticks(first_ms, end_ms, 1_000))
    recurring = [cron_every_second(f"every-second-{i}", first_ms, end_ms) for i in range(4)]
    one_offs = {f"one-off-{i}": first_ms + 700 + i * 1_900 for i in range(12)}
    root = cron_every_second("dag-root", first_ms, end_ms)
    root["cron"]["expression"] = "*/2 * * * * *"
    child = {"job_id": "dag-child", "handler": "tests.effect", "payload": 0,
             "depends_on": ["dag-root"], "overlap": "allow"}  # fmt: skip
    requests = [
        *recurring,
        cron_every_second("paused", first_ms, end_ms),
        *(one_off(job, at) for job, at in one_offs.items()),
        root,
        child,
        cron_every_second("cancelled", first_ms, end_ms),
        one_off("an-hour-later", first_ms + 3_600_000),
    ]
    with KafkronClient(IngestSettings(kafka=old, view_dir=view_dir)) as client:
        client.submit_many(requests)
        client.pause("paused")
        client.cancel("cancelled")
    root_ticks = [t for t in every if t // 1_000 % 2 == 0]
    expected = {r["job_id"]: every for r in recurring}
    expected |= {job: [at] for job, at in one_offs.items()}
    expected |= {"dag-root": root_ticks, "dag-child": root_ticks}
    return {"run": expected, "paused": every}


def finals_by_namespace(ledgers: dict[str, Ledger]) -> dict[str, dict[str, list[str]]]:
    return {name: ledger.final_statuses() for name, ledger in ledgers.items()}


def test_jobs_move_to_four_partitions_and_each_fire_happens_once_across_both(
    old: KafkaSettings,
    new: KafkaSettings,
    fleets: list[Fleet],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    old_fleet, new_fleet = fleets
    ensure_topics(new)
    old_fleet.start()
    new_fleet.start()
    first_ms = whole_second_ms(now_ms() + 2_000)
    fires = submit(old, tmp_path / "view", first_ms)
    time.sleep(max(0.0, (first_ms + 3_000 - now_ms()) / 1000))
    work_dir = tmp_path / "migration"
    assert migrate(old, new, work_dir, "--cutover-in-s", "12") == 0, capsys.readouterr()
    said = capsys.readouterr().out
    with capsys.disabled():
        print(f"\n{said}")  # the migration's account of itself, with -s
    state = MigrationState.load(work_dir)
    cutover_ms = state.cutover_ms
    assert state.phase is Phase.DONE and first_ms + 15_000 <= cutover_ms <= first_ms + 20_000
    assert "the old timers applied the cut" in said and "WARNING" not in said, said

    ledgers = {"old": Ledger(old), "new": Ledger(new)}
    wanted = {e for job, at in fires["run"].items() for e in executions(job, at)}
    wanted |= executions("paused", fires["paused"])
    deadline = time.monotonic() + (first_ms + SPAN_MS - now_ms()) / 1000 + 30
    while time.monotonic() < deadline:
        seen = {e for ledger in ledgers.values() for e in ledger.finals()}
        if wanted <= seen:
            break
        time.sleep(0.5)
    time.sleep(2)  # a late second fire would show here
    outcomes = finals_by_namespace(ledgers)
    for ledger in ledgers.values():
        ledger.close()

    def side(tick_ms: int) -> str:
        return "old" if tick_ms < cutover_ms else "new"

    problems = []
    for job, at in [*fires["run"].items(), ("paused", fires["paused"])]:
        status = "SKIPPED" if job == "paused" else "SUCCEEDED"
        for tick_ms, execution in sorted((t, f"{job}@{t}") for t in at):
            want = {side(tick_ms): [status]}
            got = {n: o[execution] for n, o in outcomes.items() if execution in o}
            if got != want:
                problems.append((execution, tick_ms - cutover_ms, got, want))
    assert not problems, (problems[:10], len(problems), old_fleet.logs(), new_fleet.logs())
    extra = {e for o in outcomes.values() for e in o} - wanted
    assert not extra, extra  # nothing of the cancelled job, nor an hour early
    # Fires on both sides of the cut-over, and the new namespace uses its 4 partitions.
    assert {side(t) for t in fires["run"]["every-second-0"]} == {"old", "new"}
    partitions = {p for p, _, _, _ in _results(new)}
    assert partitions == {0, 1, 2, 3}, partitions
    runs = old_fleet.effects()
    assert {runs[("start", e)] for e in wanted if not e.startswith("paused")} == {1}


def _results(kafka: KafkaSettings) -> list[tuple[int, int, bytes | None, bytes | None]]:
    topic = TopicNames(kafka.namespace).job_results
    return list(read_range(kafka, topic, {}, end_offsets(kafka, topic)))


def test_a_cut_the_old_timers_do_not_apply_in_time_is_rolled_back(
    old: KafkaSettings,
    new: KafkaSettings,
    fleets: list[Fleet],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    old_fleet, _ = fleets
    old_fleet.start("timer", "executor")
    first_ms = whole_second_ms(now_ms() + 2_000)
    end_ms = first_ms + 14_000
    with KafkronClient(IngestSettings(kafka=old, view_dir=tmp_path / "view")) as client:
        client.submit_many([cron_every_second("every-second", first_ms, end_ms)])
    time.sleep(max(0.0, (first_ms + 1_000 - now_ms()) / 1000))
    old_fleet.processes["timer"].send_signal(signal.SIGSTOP)  # a timer that keeps nothing up
    try:
        code = migrate(old, new, tmp_path / "migration", "--cutover-in-s", "8", "--margin-s", "4")
    finally:
        old_fleet.processes["timer"].send_signal(signal.SIGCONT)
    err = capsys.readouterr().err
    with capsys.disabled():
        print(f"\n{err}")
    assert code == 1 and "rolled back" in err and "did not apply the cut" in err, err
    assert MigrationState.load(tmp_path / "migration").phase is Phase.ROLLED_BACK
    assert sum(end_offsets(new, TopicNames(new.namespace).jobs).values()) == 0
    jobs = TopicNames(old.namespace).jobs
    latest = [CODEC.decode(RecordKind.JOB, v) for _, _, _, v in
              read_range(old, jobs, {}, end_offsets(old, jobs)) if v is not None]  # fmt: skip
    assert latest[-2]["cron"]["end_ms"] < end_ms  # the cut,
    assert latest[-1]["cron"]["end_ms"] == end_ms  # then the original again
    # The old namespace fires every tick, those after the abandoned cut-over too, once.
    ledger = Ledger(old)
    try:
        wanted = executions("every-second", ticks(first_ms, end_ms, 1_000))
        finals = ledger.wait_for(wanted, timeout_s=(end_ms - now_ms()) / 1000 + 30)
    finally:
        ledger.close()
    assert finals == dict.fromkeys(wanted, 1), (sorted(set(wanted) - set(finals)), finals)
