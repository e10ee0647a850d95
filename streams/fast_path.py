"""What a fast record path says when the reference codec (fastavro) serves instead of it.

Every fast reader and writer of kafkron is "exact or unused": it proves itself against the
codec at start-up and hands the codec any record it cannot be sure of. :class:`FastPath`
makes both visible: a path switched off at start-up logs one WARNING naming the path and why
(every record then costs the generic codec), and the records a working path hands to the
codec are counted, the first one logged at INFO (records with an attempt history, 10-byte
varints and garbage go there on purpose).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class FastPath:
    """The state of one fast path: on or off, and how many records it left to the codec."""

    __slots__ = ("enabled", "fallbacks", "name")

    def __init__(self, name: str, enabled: bool, why_off: str = "") -> None:
        self.name = name
        self.enabled = enabled
        self.fallbacks = 0
        if not enabled:
            log.warning(
                "%s is off: %s; every record goes through the generic codec (slower, same result)",
                name,
                why_off or "it did not read its probe records exactly as the codec does",
            )

    def fell_back(self) -> None:
        """Count one record left to the codec (the first is logged)."""
        self.fallbacks += 1
        if self.fallbacks == 1 and self.enabled:
            log.info("%s left its first record to the generic codec", self.name)
