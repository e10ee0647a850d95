"""``kafkron token add|list|revoke`` and where a command's token comes from; no broker."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from services import cli
from services.operator_cli.config import Given, Setting, resolve_target
from services.operator_cli.exceptions import RefusedError
from services.operator_cli.profile import Profile
from services.operator_cli.rest import ApiClient
from streams.api_tokens import TokenTable, read_tokens_file

NONE = Given(None, "")
PROFILE = Profile(api_url="http://p:1", bootstrap_servers="b:1", namespace="p.", token="kfr_p")


def kafkron(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_add_prints_the_token_once_and_stores_its_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.json"
    code, out, err = kafkron(capsys, "token", "add", "--tenant", "acme", "--file", str(path))
    assert code == 0, err
    token = out.strip()
    assert token.startswith("kfr_") and token not in path.read_text()
    grant = TokenTable(path).grant_of(token)
    assert grant is not None and grant.tenant == "acme"
    monkeypatch.setenv("KAFKRON_INGEST_TOKENS_FILE", str(path))  # the API's own variable
    code, out, _ = kafkron(capsys, "token", "add", "--admin", "--note", "ops", "--json")
    assert code == 0
    added = json.loads(out)
    assert added["admin"] and added["note"] == "ops"
    admin = TokenTable(path).grant_of(added["token"])
    assert admin is not None and admin.admin
    code, out, _ = kafkron(capsys, "token", "list")
    assert code == 0 and "tenant acme" in out and "admin  ops" in out and "2 token(s)" in out
    assert token not in out and added["token"] not in out
    code, out, _ = kafkron(capsys, "token", "list", "--json")
    listed = json.loads(out)["items"]
    assert [i["tenant"] for i in listed] == ["acme", None]
    assert all("hmac_sha256" not in i and "salt" not in i for i in listed)
    code, out, _ = kafkron(capsys, "token", "revoke", added["id"])
    assert code == 0 and TokenTable(path).grant_of(added["token"]) is None
    assert [e.tenant for e in read_tokens_file(path).tokens] == ["acme"]
    code, _, err = kafkron(capsys, "token", "revoke", added["id"])
    assert code == 1 and "has no token" in err


@pytest.mark.parametrize(
    "args",
    [
        ["token", "add", "--file", "x.json"],  # neither
        ["token", "add", "--tenant", "a", "--admin", "--file", "x.json"],  # both
        ["token", "add", "--tenant", "not a name", "--file", "x.json"],
        ["token", "add", "--tenant", "a"],  # no file
    ],
)
def test_add_usage_errors(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KAFKRON_INGEST_TOKENS_FILE", raising=False)
    assert kafkron(capsys, *args)[0] == 2


def test_the_token_comes_from_flag_env_or_the_profile_of_the_same_api() -> None:
    def target(api: Given, token: Given) -> object:
        path = Path("/p.json")
        return resolve_target(api_url=api, bootstrap_servers=NONE, namespace=NONE,
                              profile=PROFILE, profile_path=path, token=token)  # fmt: skip

    flag = target(NONE, Given("kfr_f", "--token"))
    assert flag.token == Setting("kfr_f", "--token")  # type: ignore[attr-defined]
    from_profile = target(NONE, NONE)
    assert from_profile.token.value == "kfr_p"  # type: ignore[attr-defined]
    # Another API named by a flag never gets the profile's token.
    elsewhere = target(Given("http://other:2", "--api"), NONE)
    assert elsewhere.token is None  # type: ignore[attr-defined]
    no_profile = resolve_target(api_url=NONE, bootstrap_servers=NONE, namespace=NONE,
                                profile=None, profile_path=Path("/p.json"))  # fmt: skip
    assert no_profile.token is None


def test_the_client_sends_the_token_and_a_401_says_what_to_do() -> None:
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(401, json={"detail": "this API needs a bearer token"})

    api = Setting("http://api", "--api")
    cases = [
        (None, "give --token or KAFKRON_TOKEN"),
        (Setting("kfr_x", "KAFKRON_TOKEN"), "from KAFKRON_TOKEN was refused"),
    ]
    for token, says in cases:
        client = ApiClient(api, token=token)
        client._http = httpx.Client(  # the same headers, a fake transport
            base_url="http://api",
            headers=client._http.headers,
            transport=httpx.MockTransport(answer),
        )
        with client, pytest.raises(RefusedError, match=says) as caught:
            client.get("/api/jobs")
        assert caught.value.status_code == 401
        assert "kfr_x" not in str(caught.value)
    assert seen == [None, "Bearer kfr_x"]
