"""The local profile: where the cluster that ``kafkron up`` started can be reached.

``kafkron up`` writes it once every service serves and removes it when it stops (only when
it is still its own: another ``up`` may have written one since). Every operator command
reads it, so ``kafkron dlq list`` finds that cluster with no environment set; flags and
``KAFKRON_*`` environment variables win over it (``services/operator_cli/config.py``).

It lives at ``$KAFKRON_PROFILE`` when set, else ``$XDG_CONFIG_HOME/kafkron/profile.json``
(``~/.config/kafkron/profile.json``): one per user, found from any working directory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from streams.exceptions import ConfigurationError

PROFILE_ENV = "KAFKRON_PROFILE"
"""Environment variable naming the profile file (tests and several clusters use it)."""


class Profile(BaseModel):
    """What an operator command needs to reach a running cluster."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    api_url: str
    bootstrap_servers: str
    namespace: str
    token: str | None = None  # the API's bearer token; the file is then only for its owner
    written_by_pid: int | None = None
    written_at_ms: int | None = None


def profile_path(environ: Mapping[str, str]) -> Path:
    """Where the profile is, from ``KAFKRON_PROFILE``, ``XDG_CONFIG_HOME`` or ``HOME``."""
    named = environ.get(PROFILE_ENV)
    if named:
        return Path(named)
    config_home = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config_home) / "kafkron" / "profile.json"


def read_profile(path: Path) -> Profile | None:
    """The profile at ``path``; None when there is none. A damaged one is an error that says
    which file to delete."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return Profile.model_validate_json(text)
    except ValidationError as exc:
        raise ConfigurationError(
            f"the profile {path} is not readable ({exc.error_count()} error(s)): delete it, "
            "or start the cluster again with 'kafkron up'"
        ) from None


def write_profile(path: Path, profile: Profile) -> None:
    """Write ``profile`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stamped = profile.model_copy(
        update={"written_by_pid": os.getpid(), "written_at_ms": time.time_ns() // 1_000_000}
    )
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it may hold a token
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(json.dumps(stamped.model_dump(exclude_none=True), indent=2) + "\n")
    partial.replace(path)


def live_owner(path: Path) -> int | None:
    """The pid of another running process that wrote the profile at ``path`` (a ``kafkron
    up`` still running), or None when there is none: no profile, a damaged one, its writer
    gone, or this process."""
    try:
        profile = read_profile(path)
    except ConfigurationError:
        return None
    pid = None if profile is None else profile.written_by_pid
    if pid is None or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid  # alive, another user's
    return pid


def remove_own_profile(path: Path) -> bool:
    """Delete the profile if this process wrote it; True when deleted."""
    try:
        profile = read_profile(path)
    except ConfigurationError:
        return False
    if profile is None or profile.written_by_pid != os.getpid():
        return False
    path.unlink(missing_ok=True)
    return True
