"""The API's metrics on a port of their own (services/ingest/metrics.py), on the real broker:
each API process serves its status view's health on ``metrics_port`` + its index."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from infra.broker import free_port
from services.ingest.metrics import ApiCollector
from services.ingest.settings import IngestSettings

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[3]


def scrape(port: int) -> dict[str, float]:
    """Unlabelled samples by name ({} while nothing listens)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return {}
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if not s.labels
    }


@pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="needs SO_REUSEPORT")
def test_each_api_process_serves_its_view_health_on_a_metrics_port_of_its_own(
    ingest_settings: IngestSettings, tmp_path: Path
) -> None:
    metrics_port = free_port()
    while True:  # two in a row: process 1 serves on metrics_port + 1
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", metrics_port + 1))
                break
            except OSError:
                metrics_port = free_port()
    settings = ingest_settings.model_copy(
        update={"http_port": free_port(), "api_processes": 2, "metrics_port": metrics_port}
    )
    script = "import sys; from services.ingest.main import run; from services.ingest.settings "
    script += "import IngestSettings; run(IngestSettings.model_validate_json(sys.argv[1]))"
    supervisor = subprocess.Popen(
        [sys.executable, "-c", script, settings.model_dump_json()], cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 60
        ready: dict[int, dict[str, float]] = {0: {}, 1: {}}
        while not all(s.get("kafkron_api_view_ready") == 1 for s in ready.values()):
            assert time.monotonic() < deadline, f"the views never showed ready: {ready}"
            assert supervisor.poll() is None
            ready = {i: scrape(metrics_port + i) for i in ready}
            time.sleep(0.2)
        for samples in ready.values():
            assert samples["kafkron_api_view_undecodable_records_total"] == 0
            assert samples["process_resident_memory_bytes"] > 0
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(30)
        finally:
            if supervisor.poll() is None:
                supervisor.kill()


def test_before_the_app_started_its_view_the_view_is_not_ready() -> None:
    samples = {s.name: s.value for f in ApiCollector(lambda: None).collect() for s in f.samples}
    assert samples == {"kafkron_api_view_ready": 0.0}
