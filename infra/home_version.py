"""Which Kafka version a broker home belongs to, so that a home is never started by another.

A home's storage is written in its Kafka's format, and an older Kafka may not read a newer
one's: a home written by 4.4 fails on 4.2.2 deep in the JVM ("Can't read version 4 of
BrokerEndpoint"). ``kafka-version`` in the home records the Kafka that formatted it or last
ran it; :func:`check` refuses a start with another version, naming both and the ways out.
A home without the file (written before it existed) is unknown: it starts as before and is
recorded once it answers.
"""

from __future__ import annotations

from pathlib import Path

from streams.exceptions import BrokerError

VERSION_FILE = "kafka-version"


def recorded_version(home: Path) -> str | None:
    """The Kafka version recorded in ``home``, or None when it has no record."""
    try:
        text = (home / VERSION_FILE).read_text().strip()
    except FileNotFoundError:
        return None
    return text or None


def record_version(home: Path, version: str) -> None:
    """Record ``version`` as the Kafka of ``home`` (written whole: a rename, never half)."""
    home.mkdir(parents=True, exist_ok=True)
    partial = home / f"{VERSION_FILE}.tmp"
    partial.write_text(version + "\n")
    partial.replace(home / VERSION_FILE)


def check(home: Path, version: str, whole_home: Path | None = None) -> None:
    """Raise :class:`BrokerError` if ``home`` is recorded for a Kafka other than
    ``version``; a home without a record passes. ``whole_home`` is what to delete when it
    is not ``home`` itself: a cluster's folder, not one node's."""
    recorded = recorded_version(home)
    delete = whole_home or home
    if recorded is None or recorded == version:
        return
    raise BrokerError(
        f"the broker home {home} was written by Kafka {recorded}, and this start would run "
        f"Kafka {version}: not started (a home from a newer Kafka may not start on an older "
        'one, e.g. 4.4 -> 4.2.2 fails with "Can\'t read version 4 of BrokerEndpoint"). '
        f"Either delete {delete} (its topics and their records are lost) and start again, or "
        f"run Kafka {recorded} with KAFKRON_BROKER_KAFKA_VERSION={recorded}."
    )
