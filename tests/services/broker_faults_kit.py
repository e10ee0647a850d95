"""Helpers of the broker fault tests; no tests here.

A fault run (``bench/broker_faults.py``) whose executor runs ``tests.effect`` (the executor
kit's ``record_effect``), so that the handler's runs are counted from its own effect log,
and the checks every fault test makes.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.broker_faults import NO_LEADER_STOP, FaultFigures, FaultPlan, report, run_faults
from infra.cluster import LocalCluster
from infra.settings import BrokerSettings
from services.executor.settings import DEFAULT_HANDLER_SPECS

from .executor.test_service_kit import EFFECT_SPEC, EFFECTS_ENV, effects

ROOT = Path(__file__).resolve().parents[2]
LIBS = ROOT / ".state" / "kafka-libs"


def own_cluster(home: Path, nodes: int) -> LocalCluster:
    """A Kafka of ``nodes`` nodes of this test's own, on free ports (never the dev broker)."""
    return LocalCluster(
        BrokerSettings(
            home=home, count=nodes, port=0, controller_port=0, heap_mb=512, libs_dir=LIBS
        )
    )


def effect_plan(work_dir: Path, **fields: object) -> FaultPlan:
    """A small fault plan whose handler logs its runs to ``work_dir/effects.log``."""
    env = {
        "KAFKRON_EXECUTOR_HANDLER_SPECS": json.dumps([EFFECT_SPEC, *DEFAULT_HANDLER_SPECS]),
        "KAFKRON_EXECUTOR_LOAD_ENTRY_POINTS": "false",
        EFFECTS_ENV: str(work_dir / "effects.log"),
    }
    values: dict[str, object] = {
        "herd": 5_000,
        "steady_per_s": 100,
        "steady_s": 15.0,
        "lead_s": 8.0,
        "partitions": 4,
        "handler": "tests.effect",
        "executor_env": env,
    }
    values.update(fields)
    return FaultPlan(**values)  # type: ignore[arg-type]


def run_and_check(cluster: LocalCluster, plan: FaultPlan, work_dir: Path) -> FaultFigures:
    """Run the plan and check what every fault must leave: every acknowledged create on
    ``jobs``, each with a final outcome, only SUCCEEDED, each outcome from a handler run, no
    transaction marker the broker dropped (KAFKA-20734), and services that ran through and
    said once that the broker went and once that it came back (none stopped on "No leaders
    found", ``NO_LEADER_STOP``: a restore in the restarted node's moment without leaders
    retries it)."""
    figures = run_faults(cluster, plan, work_dir)
    print("\n" + report(figures))
    assert not figures.not_written, f"acknowledged, not on jobs: {sorted(figures.not_written)[:5]}"
    stopped = figures.stopped_without_leader()
    assert not stopped, f"{stopped} stopped on '{NO_LEADER_STOP}'"
    lost = figures.lost
    assert not lost, f"{len(lost)} lost, e.g. {lost[:5]} (pinned: {len(figures.pinned)})"
    assert not figures.skipped_markers, f"markers dropped: {figures.skipped_markers[:2]}"
    statuses = set(figures.ledger.statuses)
    assert statuses <= {"STARTED", "SUCCEEDED"}, figures.ledger.statuses
    runs = effects(work_dir / "effects.log")
    ran = figures.ledger.finals
    assert all(runs[("done", e)] >= 1 for e in ran), "an outcome without a handler run"
    reruns = sum(runs[("start", e)] > 1 for e in ran)
    print(f"reruns (a handler run again after an aborted commit): {reruns:,}")
    assert figures.services_alive.keys() == {"timer", "executor"}
    for service in sorted(figures.services_alive):
        assert figures.services_alive[service], f"{service} exited"
        down, back, rdkafka = figures.broker_lines(service)
        assert (down, back) == (1, 1), f"{service}: {down} lost lines, {back} back lines"
        assert rdkafka <= 30, f"{service} logged {rdkafka} librdkafka lines"
    return figures
