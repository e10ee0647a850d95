"""Errors of the namespace migration."""

from __future__ import annotations

from streams.exceptions import KafkronError


class MigrationRefusedError(KafkronError):
    """The migration did not start (or resume): nothing was written. The message says why."""


class MigrationRolledBackError(KafkronError):
    """The cut could not be confirmed before its deadline and was undone in the old
    namespace; nothing was written to the new one. The message says why and what to fix."""
