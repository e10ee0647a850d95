"""Several API processes on one port (``api_processes``), on the real broker."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from services.ingest.settings import IngestSettings
from tests.services.ingest.test_ingest_api import one_off

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children_of(pid: int) -> list[int]:
    """The API processes a supervisor started."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if fields[1] == str(pid) and b"resource_tracker" not in cmdline:  # its helper
            found.append(int(stat.parent.name))
    return found


def fresh(url: str) -> httpx.Client:
    """A client on its own new connection (the kernel picks a process per connection)."""
    return httpx.Client(base_url=url, timeout=30)


@pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="needs SO_REUSEPORT")
def test_two_api_processes_share_the_port_and_a_key(
    ingest_settings: IngestSettings, tmp_path: Path
) -> None:
    port = free_port()
    settings = ingest_settings.model_copy(
        update={"http_port": port, "api_processes": 2, "view_dir": tmp_path / "view"}
    )
    script = "import sys; from services.ingest.main import run; from services.ingest.settings "
    script += "import IngestSettings; run(IngestSettings.model_validate_json(sys.argv[1]))"
    supervisor = subprocess.Popen(
        [sys.executable, "-c", script, settings.model_dump_json()], cwd=ROOT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        healthy = 0
        while healthy < 10:  # several fresh connections in a row: both processes are up
            assert time.monotonic() < deadline, "the API processes did not become healthy"
            assert supervisor.poll() is None
            try:
                with fresh(url) as client:
                    ok = client.get("/healthz").status_code == 200
            except httpx.HTTPError:
                ok = False
            healthy = healthy + 1 if ok else 0
            time.sleep(0.2)
        workers = children_of(supervisor.pid)
        assert len(workers) == 2
        assert (tmp_path / "view").is_dir() and (tmp_path / "view-1").is_dir()

        body = one_off(payload={"shared": True})
        answers = []
        for _ in range(12):  # new connections spread over both processes
            with fresh(url) as client:
                answers.append(
                    client.post("/api/jobs", json=body, headers={"Idempotency-Key": "k"})
                )
        assert [a.status_code for a in answers] == [201] + [200] * 11
        assert len({a.json()["job_id"] for a in answers}) == 1

        created = []
        for i in range(12):
            with fresh(url) as client:
                response = client.post("/api/jobs", json=one_off(payload={"i": i}))
                assert response.status_code == 201
                created.append(response.json()["job_id"])
        # Each process has its own view: a GET may reach the one that has not read the job
        # yet (404 for a moment), and both views converge.
        for job_id in created:
            deadline = time.monotonic() + 20
            seen = 0
            while seen < 4:
                assert time.monotonic() < deadline, f"job {job_id} not visible everywhere"
                with fresh(url) as client:
                    status = client.get(f"/api/jobs/{job_id}").status_code
                seen = seen + 1 if status == 200 else 0
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            assert supervisor.wait(30) is not None
        finally:
            if supervisor.poll() is None:
                supervisor.kill()
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"worker {pid} still runs"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_api_processes_need_a_fixed_port(ingest_settings: IngestSettings) -> None:
    from services.ingest.main import run
    from streams.exceptions import ConfigurationError

    with pytest.raises(ConfigurationError, match="fixed http_port"):
        run(ingest_settings.model_copy(update={"http_port": 0, "api_processes": 2}))
