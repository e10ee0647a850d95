"""A single broker SIGKILLed mid-herd, mid-steady load and mid-submissions, then started again
(``bench/broker_faults.py`` on a broker of the test's own, infra's Kafka version).

What holds: every create the client acknowledged is on ``jobs`` and ends with exactly one
SUCCEEDED, from a handler run; no fire is lost or doubled; the timer and the executor carry on
without a restart, each saying once that the broker went and once that it came back; fires
resume within seconds of the broker's return.

Kafka 4.3 and 4.4 break this on one node (KAFKA-20734): the restarted broker aborts the
transactions open at the kill but drops their abort markers when the node's previous
registration is fenced (its partitions then have no leader for a moment, and the coordinator
takes them for deleted). The aborted records then read as committed (two outcomes) or pin the
last stable offset (jobs never fired). infra runs Kafka 4.2.2, which queues such markers until
the partition has a leader again. The test fails if the bug comes back: on the broker's log
line for the dropped markers, which every such restart on 4.3.2 and 4.4.0 wrote, even in the
runs whose ledger happened to show no double (bench/HISTORY.md, 2026-12-05).

Known and let through only with its error in the log (``broker_faults_kit.run_and_check``): a
service whose restore meets the restart's moment without leaders stops on librdkafka's "No
leaders found" (not retried by ``streams/state/recovery.py``), and its jobs wait for its
restart (2 of 11 single-node runs on 4.1.2 and 4.2.2).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .broker_faults_kit import effect_plan, own_cluster, run_and_check

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


@pytest.mark.timeout(300)
def test_broker_sigkill_and_restart_mid_herd_and_mid_submissions(tmp_path: Path) -> None:
    cluster = own_cluster(tmp_path / "kafka", nodes=1)
    plan = effect_plan(tmp_path, down_s=2.0, stall_s=20.0)
    try:
        figures = run_and_check(cluster, plan, tmp_path)
    finally:
        cluster.stop()
    assert figures.back_ms is not None
    first_fire_ms = figures.ledger.first_fire_after_ms(figures.back_ms)
    assert first_fire_ms is not None, "nothing fired after the broker came back"
    assert first_fire_ms - figures.back_ms < 30_000
    explained, doubled = figures.doubled()
    assert not (explained or doubled), f"doubled: {sorted(explained | doubled)[:5]}"
    assert not figures.ledger.doubled(), "two final outcomes for one execution"
