"""examples/faust_agent.py with services/faust_codecs.py, on the real broker.

faust-streaming cannot share kafkron's environment (its mode-streaming requires croniter < 6,
kafkron >= 6), so the agent runs under ``KAFKRON_FAUST_PYTHON``, an interpreter with
faust-streaming, fastavro, pydantic and pydantic-settings, and kafkron's source on
``PYTHONPATH``. Without one (and without faust in this interpreter) the test is skipped.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streams.codec import Codec, RecordKind
from streams.settings import KafkaSettings
from streams.topics import TopicNames

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
CODEC = Codec.from_directory()


def faust_python() -> str:
    """An interpreter that can import faust, or skip."""
    for candidate in (os.environ.get("KAFKRON_FAUST_PYTHON"), sys.executable):
        if (
            candidate
            and subprocess.run(
                [candidate, "-c", "import faust"], capture_output=True, check=False
            ).returncode
            == 0
        ):
            return candidate
    pytest.skip(
        "faust-streaming is not installed here (it requires croniter < 6, kafkron >= 6): "
        "set KAFKRON_FAUST_PYTHON to a venv that has faust-streaming (README, faust agents)"
    )


def result(job_id: str, status: str) -> bytes:
    return CODEC.encode(
        RecordKind.EXECUTION_RESULT,
        {"execution_id": f"{job_id}@1", "job_id": job_id, "scheduled_for_ms": 1, "attempt": 3,
         "status": status, "reason": "attempts exhausted", "recorded_at_ms": 2},
    )  # fmt: skip


def read_jobs(settings: KafkaSettings, until_s: float) -> dict[str, dict[str, object]]:
    topic = TopicNames(settings.namespace).jobs
    consumer = Consumer(settings.client_config(**{"group.id": f"r-{uuid.uuid4().hex[:6]}"}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(settings.partitions)])
    found: dict[str, dict[str, object]] = {}
    deadline = time.monotonic() + until_s
    try:
        while time.monotonic() < deadline:
            if found:  # a follow-up of the SUCCEEDED, were there one, comes with it
                deadline = min(deadline, time.monotonic() + 2.0)
            for m in consumer.consume(num_messages=100, timeout=0.5):
                if m.error() is None and (value := m.value()) is not None:
                    found[(m.key() or b"").decode()] = CODEC.decode(RecordKind.JOB, value)
    finally:
        consumer.close()
    return found


def test_a_dead_letter_result_becomes_a_follow_up_job(
    topics: KafkaSettings, tmp_path: Path
) -> None:
    python = faust_python()
    producer = Producer(topics.client_config())
    names = TopicNames(topics.namespace)
    producer.produce(names.job_results, key=b"ok", value=result("ok", "SUCCEEDED"))
    producer.produce(names.job_results, key=b"dead", value=result("dead", "DEAD_LETTER"))
    assert producer.flush(30) == 0
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "KAFKRON_BOOTSTRAP_SERVERS": topics.bootstrap_servers,
        "KAFKRON_NAMESPACE": topics.namespace,
        "KAFKRON_FAUST_APP_ID": f"followups-{uuid.uuid4().hex[:6]}",
    }
    log = (tmp_path / "agent.log").open("wb")
    agent = subprocess.Popen(
        [python, "-m", "examples.faust_agent", "worker", "-l", "info"],
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        jobs = read_jobs(topics, until_s=120)
    finally:
        agent.send_signal(signal.SIGTERM)
        try:
            agent.wait(30)
        except subprocess.TimeoutExpired:
            agent.kill()
        log.close()
    assert list(jobs) == ["followup-dead@1"], (tmp_path / "agent.log").read_text()[-3000:]
    job = jobs["followup-dead@1"]
    assert job["handler"] == "examples.echo" and job["labels"] == {"follows": "dead"}
    assert b'"execution_id": "dead@1"' in job["payload"]  # type: ignore[operator]
    assert job["run_at_ms"] is not None and job["status"] == "SCHEDULED"
