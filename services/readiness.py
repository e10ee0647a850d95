"""Is a service of ``kafkron up`` serving yet: probes from outside its process.

A consumer-group service (timer, executor) is serving once its group has a member with
partitions assigned; the API once ``GET /healthz`` answers 200 (its status view caught up,
its producer healthy). ``kafkron up`` prints "ready" only after every probe passed.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from streams.settings import KafkaSettings

PROBE_TIMEOUT_S = 2.0
"""How long one probe waits for the broker or the API to answer."""
GROUP_PROBE_TIMEOUT_S = 15.0
"""A group probe's wait for its answer. Long, because librdkafka 2.16 can abort the whole
process in an admin request to a group coordinator (``rd_kafka_enq_once_del_source_return:
Assertion `eonce->refcnt > 0' failed``, confluentinc/librdkafka#4605, open): ``kafkron up`` on
a busy 3-broker cluster died so in 3 of 5 runs with 2 s, and in none of 3 with 15 s."""


@dataclass(frozen=True, slots=True)
class Readiness:
    """One probe's answer: ``detail`` says what was seen, ready or not."""

    ready: bool
    detail: str


Probe = Callable[[], Readiness]


def group_probe(kafka: KafkaSettings, group_id: str, member: str | None = None) -> Probe:
    """Ready when consumer group ``group_id`` has partitions assigned to ``member`` (a
    member's client id: the process's worker id, see ``streams.kafka.consumer``), or to
    any member when ``member`` is None or the operator set ``client.id`` for every client.

    Naming the member keeps a member of an earlier run, until its session times out, or
    another process of the group from passing for the one just started.
    """
    admin = AdminClient(kafka.client_config())
    if "client.id" in kafka.librdkafka:
        member = None
    wanted = f"{group_id} (member {member})" if member else group_id

    def probe() -> Readiness:
        try:
            futures = admin.describe_consumer_groups(
                [group_id], request_timeout=GROUP_PROBE_TIMEOUT_S
            )
            group = futures[group_id].result()
        except Exception as exc:  # the broker is busy or the group is not there yet
            return Readiness(False, f"group {wanted}: {exc}")
        members = [m for m in group.members if member is None or m.client_id == member]
        assigned = sum(len(m.assignment.topic_partitions) for m in members)
        if not assigned:
            return Readiness(False, f"group {wanted}: no partitions assigned yet")
        return Readiness(True, f"group {wanted}: {assigned} partitions")

    return probe


def http_probe(url: str) -> Probe:
    """Ready when ``GET url`` answers 200."""

    def probe() -> Readiness:
        try:
            with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as response:
                return Readiness(response.status == 200, f"{url}: {response.status}")
        except urllib.error.HTTPError as exc:  # e.g. 503 while the view catches up
            return Readiness(False, f"{url}: {exc.code}")
        except (OSError, ValueError) as exc:  # not listening yet
            return Readiness(False, f"{url}: {exc}")

    return probe


def wait_until_ready(
    probes: Mapping[str, Probe],
    timeout_s: float,
    interrupted: Callable[[], bool],
    interval_s: float = 0.5,
    on_answers: Callable[[dict[str, Readiness]], None] = lambda answers: None,
) -> dict[str, Readiness]:
    """Probe every service until all are ready, ``timeout_s`` passed, or ``interrupted()``
    (a service exited, a stop was asked for); returns the last answer of each.

    A service once ready is not probed again. ``on_answers`` sees the answers after each round.
    """
    deadline = time.monotonic() + timeout_s
    answers: dict[str, Readiness] = {}
    while True:
        for name, probe in probes.items():
            if name not in answers or not answers[name].ready:
                answers[name] = probe()
        on_answers(answers)
        done = all(a.ready for a in answers.values())
        if done or time.monotonic() > deadline or interrupted():
            return answers
        time.sleep(interval_s)
