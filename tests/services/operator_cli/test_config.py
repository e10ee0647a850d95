"""Which cluster a command talks to (flags, environment, profile, defaults), the profile file,
and the human output helpers; no broker needed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import httpx
import pytest

from services.operator_cli.config import Given, resolve_target
from services.operator_cli.output import human_time, span
from services.operator_cli.profile import (
    Profile,
    profile_path,
    read_profile,
    remove_own_profile,
    write_profile,
)
from services.operator_cli.rest import refusal_message
from streams.exceptions import ConfigurationError

PROFILE = Profile(api_url="http://10.0.0.1:8080/", bootstrap_servers="b:1", namespace="p.")
NONE = Given(None, "")


def test_flags_and_environment_win_over_the_profile_which_wins_over_defaults() -> None:
    target = resolve_target(
        api_url=Given("http://flag:1", "--api"),
        bootstrap_servers=Given("env:2", "KAFKRON_BOOTSTRAP_SERVERS"),
        namespace=NONE,
        profile=PROFILE,
        profile_path=Path("/p.json"),
    )
    assert (target.api_url.value, target.api_url.source) == ("http://flag:1", "--api")
    assert target.bootstrap_servers.source == "KAFKRON_BOOTSTRAP_SERVERS"
    assert str(target.namespace) == "p. (from the profile /p.json)"
    from_profile = resolve_target(
        api_url=NONE, bootstrap_servers=NONE, namespace=NONE, profile=PROFILE,
        profile_path=Path("/p.json"),
    )  # fmt: skip
    assert from_profile.api_url.value == "http://10.0.0.1:8080"  # no trailing slash
    assert from_profile.bootstrap_servers.value == "b:1"
    defaults = resolve_target(
        api_url=NONE, bootstrap_servers=NONE, namespace=NONE, profile=None,
        profile_path=Path("/p.json"),
    )  # fmt: skip
    assert (defaults.api_url.value, defaults.bootstrap_servers.value, defaults.namespace.value) == (
        "http://127.0.0.1:8080", "127.0.0.1:9092", "kafkron.",
    )  # fmt: skip
    assert defaults.api_url.source == "the default"


def test_profile_path_from_the_environment(tmp_path: Path) -> None:
    assert profile_path({"KAFKRON_PROFILE": "/x/p.json"}) == Path("/x/p.json")
    assert profile_path({"XDG_CONFIG_HOME": "/cfg"}) == Path("/cfg/kafkron/profile.json")
    assert profile_path({}).parts[-3:] == (".config", "kafkron", "profile.json")


def test_profile_round_trip_and_removal_only_by_its_writer(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "profile.json"
    assert read_profile(path) is None
    write_profile(path, PROFILE)
    read = read_profile(path)
    assert read is not None and read.api_url == PROFILE.api_url
    assert read.written_by_pid == os.getpid() and read.written_at_ms
    other = json.loads(path.read_text())
    path.write_text(json.dumps({**other, "written_by_pid": os.getpid() + 1}))
    assert not remove_own_profile(path) and path.exists()  # another `up` wrote it since
    write_profile(path, PROFILE)
    assert remove_own_profile(path) and not path.exists()
    assert list(path.parent.iterdir()) == []  # no temporary file left


def test_a_damaged_profile_says_which_file_to_delete(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text("{")
    with pytest.raises(ConfigurationError, match=f"the profile {path} is not readable"):
        read_profile(path)


def test_human_times() -> None:
    now = 1_780_000_000_000
    assert span(999) == "999ms" and span(61_000) == "1m 1s" and span(90_061_000) == "1d 1h"
    assert human_time(None, now) == "-"
    assert human_time("2026-05-28T20:26:40.000Z", now) == "2026-05-28 20:26:40Z (0ms ago)"
    assert human_time("2026-05-28T23:26:40Z", now).endswith("(in 3h)")
    assert human_time("2026-05-27T20:26:40Z", now).endswith("(1d ago)")


def test_refusals_read_like_sentences() -> None:
    request = httpx.Request("GET", "http://x/api/jobs")
    invalid = httpx.Response(
        422, request=request,
        json={"detail": [{"loc": ["body", "cron", "expression"], "msg": "bad cron"}]},
    )  # fmt: skip
    assert refusal_message("POST", "/api/jobs", invalid) == (
        "invalid request (422): cron.expression: bad cron"
    )
    conflict = httpx.Response(409, request=request, json={"detail": "job x is cancelled"})
    assert refusal_message("POST", "/p", conflict) == "job x is cancelled (409)"
    route = httpx.Response(404, request=request, json={"detail": "Not Found"})
    assert "an API older than this command" in refusal_message("GET", "/api/jobs", route)
    busy = httpx.Response(503, request=request, json={"detail": "view catching up"})
    assert refusal_message("GET", "/p", busy).endswith("retry in a moment")
