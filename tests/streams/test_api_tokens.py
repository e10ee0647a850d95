"""The API's tokens file: hashes at rest, checks, rotation without a restart, bad files."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import stat
from pathlib import Path

import pytest

from streams.api_tokens import (
    TokenTable,
    add_token,
    read_tokens_file,
    revoke_token,
    split_token,
    write_tokens_file,
)
from streams.exceptions import ConfigurationError


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_file_keeps_a_salted_hash_and_never_the_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    token, entry = add_token(path, "acme", note="ci")
    other, _ = add_token(path, None)
    text = path.read_text()
    token_id, secret = split_token(token) or ("", "")
    assert token.startswith("kfr_") and token_id == entry.id
    assert len(secret) >= 43  # 32 random bytes
    assert secret not in text and token not in text
    stored = json.loads(text)["tokens"]
    assert [s["tenant"] for s in stored] == ["acme", None]
    assert [s["admin"] for s in stored] == [False, True]
    salt = bytes.fromhex(stored[0]["salt"])
    assert stored[0]["hmac_sha256"] == hmac.new(salt, secret.encode(), hashlib.sha256).hexdigest()
    assert stored[0]["salt"] != stored[1]["salt"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    table = TokenTable(path)
    grant = table.grant_of(token)
    assert grant is not None and (grant.tenant, grant.token_id) == ("acme", entry.id)
    admin = table.grant_of(other)
    assert admin is not None and admin.admin


def test_wrong_malformed_and_unknown_tokens_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    token, _ = add_token(path, "acme")
    table = TokenTable(path)
    token_id, secret = split_token(token) or ("", "")
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for bad in [
        f"kfr_{token_id}_{flipped}",  # the right id, another secret
        f"kfr_{'0' * 12}_{secret}",  # an unknown id
        f"xyz_{token_id}_{secret}",
        f"kfr_{token_id}",
        secret,
        "",
    ]:
        assert table.grant_of(bad) is None, bad


def test_added_and_revoked_tokens_apply_without_a_new_table(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    old, old_entry = add_token(path, "acme")
    clock = Clock()
    table = TokenTable(path, check_interval_s=1.0, clock=clock)
    new, _ = add_token(path, "acme")
    assert table.grant_of(new) is None, "looked at the file before the interval passed"
    clock.now += 1.0
    assert table.grant_of(new) is not None
    assert revoke_token(path, old_entry.id)
    assert table.grant_of(old) is not None  # within the interval: the table read before
    clock.now += 1.0
    assert table.grant_of(old) is None
    assert table.grant_of(new) is not None
    assert not revoke_token(path, old_entry.id)


def test_a_rewrite_of_the_same_size_in_place_is_seen(tmp_path: Path) -> None:
    """The stamp is mtime, size and inode: an editor writing in place changes the mtime."""
    path = tmp_path / "tokens.json"
    first, first_entry = add_token(path, "acme")
    second, second_entry = add_token(tmp_path / "other.json", "acme")
    table = TokenTable(path, check_interval_s=0.0)
    assert table.grant_of(first) is not None
    text = path.read_text()
    replaced = json.loads(text)
    replaced["tokens"] = [json.loads(second_entry.model_dump_json())]
    body = json.dumps(replaced, indent=2) + "\n"
    assert len(body) == len(text)
    before = os.stat(path).st_mtime_ns
    with path.open("w") as out:  # in place: the same inode and size
        out.write(body)
    os.utime(path, ns=(before + 1_000_000, before + 1_000_000))
    assert table.grant_of(second) is not None
    assert table.grant_of(first) is None
    assert first_entry.id != second_entry.id


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "is not valid"),
        ('{"tokens": [{"id": "abc"}]}', "tokens.0"),
        ('{"version": 2, "tokens": []}', "version"),
        ('{"tokens": [], "extra": 1}', "extra"),
    ],
)
def test_a_bad_file_is_a_clear_error_at_start(tmp_path: Path, content: str, says: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match=says) as caught:
        TokenTable(path)
    assert str(path) in str(caught.value)


def test_entries_need_one_of_tenant_and_admin_and_unique_ids(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    _, entry = add_token(path, "acme")
    raw = json.loads(entry.model_dump_json())
    for broken, says in [
        ({**raw, "admin": True}, "exactly one of tenant"),
        ({**raw, "tenant": None}, "exactly one of tenant"),
        ({**raw, "tenant": "no spaces"}, "tenant"),
    ]:
        path.write_text(json.dumps({"tokens": [broken]}))
        with pytest.raises(ConfigurationError, match=says):
            read_tokens_file(path)
    path.write_text(json.dumps({"tokens": [raw, raw]}))
    with pytest.raises(ConfigurationError, match="same id"):
        read_tokens_file(path)


def test_a_missing_file_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="kafkron token add"):
        TokenTable(tmp_path / "nope.json")


def test_a_file_that_turns_bad_keeps_the_last_tokens_and_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens.json"
    token, _ = add_token(path, "acme")
    table = TokenTable(path, check_interval_s=0.0)
    path.write_text("{half a file")
    with caplog.at_level(logging.ERROR, logger="streams.api_tokens"):
        assert table.grant_of(token) is not None
        assert table.grant_of(token) is not None  # logged once per change, not per request
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and str(path) in errors[0].getMessage()
    assert table.last_error is not None
    path.unlink()
    assert table.grant_of(token) is not None
    fixed, _ = add_token(path, "globex")
    assert table.grant_of(fixed) is not None and table.last_error is None
    assert table.grant_of(token) is None  # the new file no longer has it


def test_write_replaces_the_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "tokens.json"
    _, entry = add_token(path, "acme")
    write_tokens_file(path, [])
    assert read_tokens_file(path).tokens == []
    assert [p.name for p in path.parent.iterdir()] == ["tokens.json"]  # no temp file left
    assert entry.id
