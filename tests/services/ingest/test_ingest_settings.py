"""IngestSettings: defaults, environment at the entry point, invariants (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from services.ingest.settings import DefaultRetry, IngestSettings
from streams.settings import KafkaSettings


def test_defaults(tmp_path: Path) -> None:
    settings = IngestSettings(kafka=KafkaSettings(state_dir=tmp_path))
    assert (settings.http_host, settings.http_port) == ("127.0.0.1", 8080)
    assert settings.max_payload_bytes == 256 * 1024
    assert settings.run_at_grace_s == 60
    assert settings.view_path == tmp_path / "ingest-view"
    assert settings.default_retry == DefaultRetry()


def test_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KAFKRON_INGEST_HTTP_PORT", "9000")
    monkeypatch.setenv("KAFKRON_INGEST_DEFAULT_RETRY__MAX_ATTEMPTS", "7")
    monkeypatch.setenv("KAFKRON_INGEST_VIEW_DIR", str(tmp_path / "v"))
    monkeypatch.setenv("KAFKRON_BOOTSTRAP_SERVERS", "broker:9093")
    settings = IngestSettings()
    assert settings.http_port == 9000
    assert settings.default_retry.max_attempts == 7
    assert settings.view_path == tmp_path / "v"
    assert settings.kafka.bootstrap_servers == "broker:9093"


def test_frozen_and_checked(tmp_path: Path) -> None:
    settings = IngestSettings(kafka=KafkaSettings(state_dir=tmp_path))
    with pytest.raises(ValidationError):
        settings.http_port = 1
    with pytest.raises(ValidationError, match="max_backoff_s"):
        IngestSettings(default_retry=DefaultRetry(initial_backoff_s=10, max_backoff_s=5))
    with pytest.raises(ValidationError):
        IngestSettings(max_payload_bytes=-1)


def test_the_api_process_runs_with_the_configured_gil_switch_interval(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``run`` sets the interval before serving (a fake server records what it saw)."""
    import sys

    import uvicorn

    from services.ingest import main

    seen: list[float] = []
    monkeypatch.setattr(
        uvicorn.Server, "run", lambda self, **_: seen.append(sys.getswitchinterval())
    )
    monkeypatch.setattr(main, "_config", lambda settings, app=None: uvicorn.Config(app=app))
    before = sys.getswitchinterval()
    try:
        monkeypatch.setenv("KAFKRON_INGEST_GIL_SWITCH_INTERVAL_S", "0.002")
        main.run(IngestSettings(kafka=KafkaSettings(state_dir=tmp_path), metrics_port=0))
    finally:
        sys.setswitchinterval(before)
    assert seen == [pytest.approx(0.002)]
    assert IngestSettings(kafka=KafkaSettings(state_dir=tmp_path)).gil_switch_interval_s == 0.002
    with pytest.raises(ValidationError):
        IngestSettings(gil_switch_interval_s=0)
