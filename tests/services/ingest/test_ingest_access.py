"""The access rules without a broker: the bind rule, a create's tenant, bearer headers."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from services.ingest.access import ADMIN, Caller, bearer_token, bind_refusal, bind_tenant
from services.ingest.exceptions import JobRequestError
from services.ingest.main import check_access, run
from services.ingest.settings import IngestSettings
from streams.api_tokens import add_token
from streams.exceptions import ConfigurationError


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_needs_no_tokens(host: str) -> None:
    assert bind_refusal(host, tokens_configured=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "api.example.com", ""])
def test_other_addresses_need_tokens(host: str) -> None:
    refusal = bind_refusal(host, tokens_configured=False)
    assert refusal is not None and "KAFKRON_INGEST_TOKENS_FILE" in refusal
    assert bind_refusal(host, tokens_configured=True) is None


def test_the_api_refuses_to_start_beyond_loopback_without_tokens(tmp_path: Path) -> None:
    """``run`` stops before it opens a socket, a view or a producer (no broker here)."""
    settings = IngestSettings(http_host="0.0.0.0", view_dir=tmp_path / "view")
    with pytest.raises(ConfigurationError, match="without KAFKRON_INGEST_TOKENS_FILE"):
        run(settings)
    assert not (tmp_path / "view").exists()


def test_start_says_whether_tokens_are_checked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="services.ingest.main"):
        check_access(IngestSettings())
        add_token(tmp_path / "t.json", "acme")
        check_access(IngestSettings(http_host="0.0.0.0", tokens_file=tmp_path / "t.json"))
    first, second = (r.getMessage() for r in caplog.records)
    assert "no API tokens" in first and "127.0.0.1 only" in first
    assert str(tmp_path / "t.json") in second


def test_a_bad_tokens_file_stops_the_app_at_creation(tmp_path: Path) -> None:
    from services.ingest.api import create_app

    (tmp_path / "t.json").write_text("[]")
    with pytest.raises(ConfigurationError, match=r"t\.json is not valid"):
        create_app(IngestSettings(tokens_file=tmp_path / "t.json"))


def test_a_create_gets_the_callers_tenant() -> None:
    acme = Caller("acme", "id")
    assert bind_tenant({"handler": "h"}, acme) == {"handler": "h", "tenant": "acme"}
    assert bind_tenant({"tenant": "acme"}, acme) == {"tenant": "acme"}
    for other in ("globex", None, 5, ""):
        with pytest.raises(JobRequestError) as caught:
            bind_tenant({"tenant": other}, acme)
        assert caught.value.errors[0]["loc"] == ["tenant"]
    assert bind_tenant({"tenant": "globex"}, ADMIN) == {"tenant": "globex"}
    assert bind_tenant({"handler": "h"}, ADMIN) == {"handler": "h"}
    assert bind_tenant(["not", "an", "object"], acme) == ["not", "an", "object"]


def test_bearer_header_parsing() -> None:
    def scope(*headers: tuple[bytes, bytes]) -> dict[str, object]:
        return {"headers": list(headers)}

    assert bearer_token(scope((b"authorization", b"Bearer kfr_a_b"))) == "kfr_a_b"
    assert bearer_token(scope((b"authorization", b"bearer  kfr_a_b "))) == "kfr_a_b"
    assert bearer_token(scope((b"authorization", b"Basic abc"))) is None
    assert bearer_token(scope((b"authorization", b"Bearer "))) is None
    assert bearer_token(scope((b"x-other", b"Bearer kfr_a_b"))) is None


def test_public_paths_and_mounts(tmp_path: Path) -> None:
    from starlette.routing import Mount
    from starlette.staticfiles import StaticFiles

    from services.ingest.access import is_public, static_prefixes

    async def metrics(scope: object, receive: object, send: object) -> None:
        raise AssertionError("never called")

    routes = [
        Mount("/ui", StaticFiles(directory=tmp_path)),
        Mount("/metrics", metrics),
        Mount("/api/internal", metrics),  # an app at a path that is not public
        Mount("", StaticFiles(directory=tmp_path)),  # the root would open everything
    ]
    static = static_prefixes(routes)
    assert static == ("/ui", "/metrics")
    for path in ("/healthz", "/metrics", "/metrics/", "/ui/app.js", "/docs", "/"):
        assert is_public(path, static), path
    for path in ("/api/jobs", "/api/internal/x", "/uix", "/healthz/x", "/api/dashboard/live"):
        assert not is_public(path, static), path
