"""A single broker SIGKILLed mid-herd, mid-steady load and mid-submissions, then started again
(``bench/broker_faults.py`` on a broker of the test's own).

What holds: every create the client acknowledged is on ``jobs``; the timer and the executor
carry on without a restart, each saying once that the broker went and once that it came back;
fires resume within seconds of the broker's return; every outcome is SUCCEEDED and comes from
a handler run.

What does not, on one node of Kafka 4.4 (KAFKA-20734, open upstream): the transaction each
service had open at the kill is aborted by the restarted broker (its timeout passed while it
was down), but no abort markers are written. The coordinator sends them before the restarted
node is unfenced; while the controller fences the node's previous registration its partitions
have no leader, and ``KRaftMetadataCache.getPartitionLeaderEndpoint`` answers empty for a
partition without a leader, which the coordinator takes for a deleted partition and skips.
Two things follow, and the test checks that nothing else happened:

- where the producer wrote again (a new epoch), the aborted records read as committed: the
  executions of the executor's open transaction have two SUCCEEDED results, one recorded
  before the kill and one after (the executor ran them again after its abort);
- where it did not, the open transaction pins the last stable offset: read_committed readers
  (a restoring timer among them) stop there, and the jobs of that partition number stay
  unfired. Every job without an outcome must sit on such a partition.

A 3-node cluster has no partition without a leader when one node dies:
``test_cluster_faults.py`` proves none of this happens there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .broker_faults_kit import effect_plan, own_cluster, run_and_check
from .executor.test_service_kit import effects

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
    explained, unexplained = figures.doubled()
    assert not unexplained, f"doubled otherwise than by the open transaction: {unexplained}"
    runs = effects(tmp_path / "effects.log")
    twice = [e for e in explained if len(figures.ledger.final_at_ms.get(e, [])) == 2]
    assert all(runs[("done", e)] >= 2 for e in twice), "a second outcome without a second run"
    assert len(figures.pinned) == len(figures.lost), "every job without an outcome is pinned"
