"""Commands find the cluster through the profile, with no KAFKRON_* environment: one the
tests write for their cluster, and the one a real ``kafkron up`` writes (and removes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from infra.broker import free_port
from services.operator_cli.profile import Profile, read_profile, write_profile
from tests.conftest import ROOT
from tests.services.operator_cli.conftest import CliCluster

pytestmark = pytest.mark.kafka


def bare_env(home: Path) -> dict[str, str]:
    """No KAFKRON_* variable at all; HOME (so the default profile path) under the test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KAFKRON_", "XDG_"))}
    return {**env, "HOME": str(home), "PYTHONPATH": str(ROOT)}


def kafkron(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "services.cli", *args], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_commands_find_the_cluster_by_the_profile_alone(
    cli_cluster: CliCluster, tmp_path: Path
) -> None:
    """The default profile path (~/.config/kafkron/profile.json); neither the API nor the
    namespace is the default one, so only the profile can lead there."""
    env = bare_env(tmp_path)
    write_profile(
        tmp_path / ".config" / "kafkron" / "profile.json",
        Profile(
            api_url=cli_cluster.api_url,
            bootstrap_servers=cli_cluster.kafka.bootstrap_servers,
            namespace=cli_cluster.kafka.namespace,
        ),
    )
    job_id = f"cli-profile-{uuid.uuid4().hex[:8]}"
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    created = _json(kafkron(env, "submit", "examples.fail", "--job-id", job_id, "--run-at", now,
                            "--json"))  # fmt: skip
    assert created["job_id"] == job_id
    assert _json(kafkron(env, "show", job_id, "--json"))["handler"] == "examples.fail"
    deadline = time.monotonic() + 60
    while True:  # the dead letter is read from this namespace's dlq, over Kafka
        rows = _json(kafkron(env, "dlq", "list", "--json"))["items"]
        if any((r["record"]["execution"] or {}).get("job_id") == job_id for r in rows):
            break
        assert time.monotonic() < deadline, rows
        time.sleep(1)
    # The environment still wins over the profile.
    elsewhere = kafkron({**env, "KAFKRON_API_URL": "http://127.0.0.1:9"}, "show", job_id)
    assert elsewhere.returncode == 1
    assert "http://127.0.0.1:9 (from KAFKRON_API_URL)" in elsewhere.stderr


def test_without_a_profile_the_error_names_the_default_and_the_fix(tmp_path: Path) -> None:
    env = {**bare_env(tmp_path), "KAFKRON_PROFILE": str(tmp_path / "none.json"),
           "KAFKRON_API_URL": "http://127.0.0.1:9"}  # fmt: skip
    done = kafkron(env, "list")
    assert done.returncode == 1
    assert "start a cluster with 'kafkron up'" in done.stderr, done.stderr


class _Lines:
    """Every line a child prints, read on a thread: a pipe nobody reads fills and blocks the
    child (and the services it started, which share it) in its next print."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        self.lines: list[str] = []
        self._stdout = process.stdout
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._stdout:
            self.lines.append(line)

    def wait_for(self, needle: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(needle in line for line in self.lines):
            if time.monotonic() > deadline or not self._reader.is_alive():
                raise AssertionError(f"no {needle!r} within {timeout_s} s:\n{self}")
            time.sleep(0.1)

    def close(self) -> None:
        """After the child and every process sharing its stdout exited (EOF)."""
        self._reader.join(timeout=10)
        self._stdout.close()

    def __str__(self) -> str:
        return "".join(self.lines)


def test_dlq_list_finds_the_cluster_kafkron_up_started(tmp_path: Path) -> None:
    """A real ``kafkron up`` (own broker on a free port, own namespace and API port): then
    ``kafkron dlq list``, ``submit`` and ``show`` with no KAFKRON_* set; the profile is gone
    after it stops."""
    env = bare_env(tmp_path)
    up_env = {
        **env,
        "KAFKRON_BROKER_HOME": str(tmp_path / "broker"),
        "KAFKRON_BROKER_LIBS_DIR": str(ROOT / ".state" / "kafka-libs"),
        "KAFKRON_BROKER_PORT": str(free_port()),
        "KAFKRON_NAMESPACE": "upprofile.",
        "KAFKRON_PARTITIONS": "2",
        "KAFKRON_STATE_DIR": str(tmp_path / "state"),
        "KAFKRON_INGEST_HTTP_PORT": str(free_port()),
        "PYTHONUNBUFFERED": "1",  # its lines as they are printed
    }
    profile = tmp_path / ".config" / "kafkron" / "profile.json"
    stderr = (tmp_path / "up.stderr").open("w")  # a file: it never blocks the writer
    up = subprocess.Popen(
        [sys.executable, "-m", "services.cli", "up"], env=up_env, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True,
    )  # fmt: skip
    printed = _Lines(up)
    try:
        printed.wait_for(f"[kafkron] profile {profile}", 180)
        written = read_profile(profile)
        assert written is not None and written.namespace == "upprofile."
        assert written.bootstrap_servers == f"127.0.0.1:{up_env['KAFKRON_BROKER_PORT']}"
        listing = kafkron(env, "dlq", "list")
        assert listing.returncode == 0, listing.stdout + listing.stderr
        assert listing.stdout.endswith("0 dead letter(s)\n")
        job_id = f"cli-up-{uuid.uuid4().hex[:8]}"
        created = kafkron(env, "submit", "examples.noop", "--job-id", job_id, "--cron", "0 3 * * *")
        assert created.returncode == 0, created.stdout + created.stderr
        assert _json(kafkron(env, "show", job_id, "--json"))["status"] == "SCHEDULED"
    finally:
        up.send_signal(signal.SIGINT)
        try:  # its services stop side by side within 20 s, then its broker within 30 s
            up.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)  # its services and broker too
            up.wait()
            tail = (tmp_path / "up.stderr").read_text()[-4000:]
            raise AssertionError(
                f"kafkron up still running 120 s after SIGINT:\n{printed}\n{tail}"
            ) from None
        finally:
            printed.close()
            stderr.close()
    assert not profile.exists(), "kafkron up removes the profile it wrote"
