"""API bearer tokens: the file of their hashes, and the table the API checks tokens against.

A token is ``kfr_<id>_<secret>``: ``id`` (12 hex digits) is public and names the entry (it
appears in ``kafkron token list`` and in logs), ``secret`` is 32 random bytes (base64url).
The file (``KAFKRON_INGEST_TOKENS_FILE``, JSON, written by ``kafkron token add``) keeps per
entry its tenant (or ``admin``), a random 16-byte salt and ``HMAC-SHA256(salt, secret)``;
never the token. Why this hash:

* The secret has 256 bits of entropy, so no dictionary or brute force can invert a fast
  hash; a slow password hash (scrypt, argon2) would add milliseconds to every request and
  buy nothing for a random secret.
* The salt makes every entry's hash unique, so a leaked file shows neither which entries
  share a secret nor matches any precomputed table; the public id makes the salt free (one
  entry to check per request, not one per entry). Digests compare in constant time.

:class:`TokenTable` re-reads the file when it changes (its mtime, size or inode, looked at
no more than once per ``check_interval_s``): rotate by adding the new token, switching the
clients, then revoking the old one, without a restart. A file that cannot be read at start is
an error naming the file and the problem; one that turns bad later keeps the tokens last read
and logs the problem (once per change of the file), so a half-edited file never locks every
client out. The writers replace the file atomically.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from streams.exceptions import ConfigurationError
from streams.identity import TENANT_PATTERN

log = logging.getLogger(__name__)

TOKEN_PREFIX = "kfr"
_ID_BYTES = 6
_SECRET_BYTES = 32
_SALT_BYTES = 16
FILE_VERSION = 1


@dataclass(frozen=True, slots=True)
class TokenGrant:
    """What a valid token may do: one tenant's jobs, or every job (``tenant`` None: admin)."""

    token_id: str
    tenant: str | None

    @property
    def admin(self) -> bool:
        return self.tenant is None


class TokenEntry(BaseModel):
    """One token as the file stores it: who it is for, and the salted hash of its secret."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[0-9a-f]{12}$")
    tenant: str | None = Field(default=None, pattern=TENANT_PATTERN)
    admin: bool = False
    salt: str = Field(pattern=r"^[0-9a-f]{32}$", description="hex")
    hmac_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="hex")
    note: str = Field(default="", max_length=200)
    created_at_ms: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _tenant_or_admin(self) -> TokenEntry:
        if (self.tenant is None) == (not self.admin):
            raise ValueError("give exactly one of tenant (a tenant's token) or admin: true")
        return self

    def grant(self) -> TokenGrant:
        return TokenGrant(self.id, None if self.admin else self.tenant)

    def matches(self, secret: str) -> bool:
        """True when ``secret`` is this entry's (constant-time comparison)."""
        expected = bytes.fromhex(self.hmac_sha256)
        return hmac.compare_digest(secret_digest(bytes.fromhex(self.salt), secret), expected)


class TokensFile(BaseModel):
    """The whole file: ``{"version": 1, "tokens": [entry, ...]}``, ids unique."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = Field(default=FILE_VERSION, ge=FILE_VERSION, le=FILE_VERSION)
    tokens: list[TokenEntry] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_ids(self) -> TokensFile:
        ids = [entry.id for entry in self.tokens]
        if len(ids) != len(set(ids)):
            raise ValueError("two tokens have the same id")
        return self


def secret_digest(salt: bytes, secret: str) -> bytes:
    """HMAC-SHA256 of the token's secret part, keyed by the entry's salt."""
    return hmac.new(salt, secret.encode(), hashlib.sha256).digest()


def split_token(token: str) -> tuple[str, str] | None:
    """(id, secret) of a well-formed token, else None."""
    prefix, _, rest = token.partition("_")
    token_id, _, secret = rest.partition("_")
    if prefix != TOKEN_PREFIX or len(token_id) != 2 * _ID_BYTES or not secret:
        return None
    return token_id, secret


def new_token(
    tenant: str | None, note: str = "", now_ms: int | None = None
) -> tuple[str, TokenEntry]:
    """A fresh token (shown once) and the entry that stores only its salted hash."""
    token_id = secrets.token_hex(_ID_BYTES)
    secret = base64.urlsafe_b64encode(secrets.token_bytes(_SECRET_BYTES)).decode().rstrip("=")
    salt = secrets.token_bytes(_SALT_BYTES)
    entry = TokenEntry(
        id=token_id,
        tenant=tenant,
        admin=tenant is None,
        salt=salt.hex(),
        hmac_sha256=secret_digest(salt, secret).hex(),
        note=note,
        created_at_ms=time.time_ns() // 1_000_000 if now_ms is None else now_ms,
    )
    return f"{TOKEN_PREFIX}_{token_id}_{secret}", entry


def read_tokens_file(path: Path) -> TokensFile:
    """The tokens file at ``path``; ConfigurationError naming the file and what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(
            f"tokens file {path} does not exist: create it with 'kafkron token add "
            "--tenant NAME' (or --admin), or unset KAFKRON_INGEST_TOKENS_FILE"
        ) from None
    except OSError as exc:
        raise ConfigurationError(f"tokens file {path} cannot be read: {exc}") from None
    try:
        return TokensFile.model_validate_json(text)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'file'}: {e['msg']}"
            for e in exc.errors(include_url=False)[:5]
        )
        raise ConfigurationError(
            f"tokens file {path} is not valid ({problems}); fix it or write it again with "
            "'kafkron token add'"
        ) from None


def write_tokens_file(path: Path, tokens: Iterable[TokenEntry]) -> None:
    """Replace the file atomically, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = TokensFile(tokens=list(tokens)).model_dump(mode="json")
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(body, indent=2) + "\n")
    partial.replace(path)


def add_token(path: Path, tenant: str | None, note: str = "") -> tuple[str, TokenEntry]:
    """Add a new token to the file (created when missing); the token, to show once."""
    existing = read_tokens_file(path).tokens if path.exists() else []
    token, entry = new_token(tenant, note)
    write_tokens_file(path, [*existing, entry])
    return token, entry


def revoke_token(path: Path, token_id: str) -> bool:
    """Remove the token ``token_id`` from the file; False when it has none of that id."""
    entries = read_tokens_file(path).tokens
    kept = [entry for entry in entries if entry.id != token_id]
    if len(kept) == len(entries):
        return False
    write_tokens_file(path, kept)
    return True


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


class TokenTable:
    """The tokens of one file, for checking bearer tokens; re-reads the file when it changes.

    Reads the file at construction (ConfigurationError when it is missing or invalid).
    Thread-safe: a reload swaps one dict, and at most one thread reloads at a time.
    """

    def __init__(
        self,
        path: Path,
        *,
        check_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._interval_s, self._clock = check_interval_s, clock
        self._stamp = _stamp(path)
        self._entries = self._index(read_tokens_file(path).tokens)
        self._next_check = clock() + check_interval_s
        self._reloading = threading.Lock()
        self.last_error: str | None = None

    @staticmethod
    def _index(entries: Iterable[TokenEntry]) -> Mapping[str, TokenEntry]:
        return {entry.id: entry for entry in entries}

    def __len__(self) -> int:
        return len(self._entries)

    def grant_of(self, token: str) -> TokenGrant | None:
        """What ``token`` may do, or None for a malformed, unknown or revoked token."""
        if self._clock() >= self._next_check:
            self.reload_if_changed()
        parts = split_token(token)
        if parts is None:
            return None
        entry = self._entries.get(parts[0])
        if entry is None or not entry.matches(parts[1]):
            return None
        return entry.grant()

    def reload_if_changed(self) -> bool:
        """Read the file again when it changed since the last read; True when it did."""
        if not self._reloading.acquire(blocking=False):
            return False  # another thread is at it; this one checks against the current table
        try:
            self._next_check = self._clock() + self._interval_s
            stamp = _stamp(self.path)
            if stamp == self._stamp:
                return False
            self._stamp = stamp
            try:
                entries = read_tokens_file(self.path).tokens
            except ConfigurationError as exc:
                self.last_error = str(exc)
                log.error("%s; the %d token(s) read before stay valid", exc, len(self._entries))
                return False
            self._entries = self._index(entries)
            self.last_error = None
            log.info("tokens file %s read again: %d token(s)", self.path, len(entries))
            return True
        finally:
            self._reloading.release()


def grants_summary(entries: Iterable[TokenEntry]) -> list[dict[str, Any]]:
    """What ``kafkron token list`` prints of each entry: never its hash or salt."""
    return [
        {
            "id": entry.id,
            "tenant": entry.tenant,
            "admin": entry.admin,
            "note": entry.note,
            "created_at_ms": entry.created_at_ms,
        }
        for entry in entries
    ]
