"""kafkron's clock: epoch milliseconds as the Kafka broker counts them, not as this host does.

The timer decides when a job is due and the executor when a held run may start, each by
:func:`now_ms`. A host whose clock runs ahead would fire early by as much, so the services
read time from the broker instead of trusting their own wall clock.

**How.** The ``clock`` topic stores records with ``message.timestamp.type=LogAppendTime``:
the broker stamps each record with its own clock when it appends it, and the delivery report
carries that stamp. A :class:`BrokerClock` produces a tiny probe every
``probe_interval_s``, timing the round trip on this host's monotonic clock, and sets

    base_ms = broker_ms + 0.5 - (sent + acked) / 2        (monotonic ms)

so that ``now_ms() = monotonic_ms + base_ms``. The broker stamped the record somewhere
between ``sent`` and ``acked``, so one probe's error is at most half its round trip plus the
stamp's 1 ms resolution; of the recent probes the one with the smallest error (allowing for
the monotonic clock's drift since, :data:`DRIFT_PPM`) sets the base. Between probes the
clock runs on the monotonic clock, so a step of this host's wall clock changes nothing.

**The promise** (docs/architecture.md, "Clocks"): a run never starts before its fire time by
more than :attr:`BrokerClock.error_ms` as measured by the broker's clock (a few ms on one
machine or a LAN). Before the first probe answers (or without the clock topic) the process
reads its own wall clock and says so in its log, once.

The base is one module global, :data:`base_ms`, read by :func:`now_ms` (one addition) and
set only by the process's :class:`BrokerClock`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message, Producer

from streams.settings import KafkaSettings
from streams.topics import CLOCK, TopicNames

log = logging.getLogger(__name__)

DRIFT_PPM = 100
"""How far this host's monotonic clock may drift from the broker's, in parts per million
(ordinary quartz is within 50): an older probe's error grows by this much per ms of age."""

SKEW_WARNING_MS = 1_000
"""A host clock further than this from the broker's is reported in the log."""

base_ms = (time.time_ns() - time.monotonic_ns()) // 1_000_000  # so now_ms() <= host ms
"""``now_ms() - monotonic ms``. The executor's compiled hot modules add it to
``time.monotonic_ns() // 1_000_000`` themselves: a call into this (interpreted) module costs
them ~0.1 us per read, 5% of a no-op execution's record path."""


def now_ms() -> int:
    """Epoch milliseconds by the broker's clock (this host's until a probe answered)."""
    return time.monotonic_ns() // 1_000_000 + base_ms


def host_skew_ms() -> int:
    """How far this host's wall clock is ahead of :func:`now_ms` (negative: behind)."""
    return time.time_ns() // 1_000_000 - now_ms()


@dataclass(frozen=True)
class ClockSample:
    """One probe: the base it implies and its error bound, both in ms."""

    base_ms: float
    error_ms: float
    taken_mono_ms: float

    def error_at(self, mono_ms: float) -> float:
        """The error bound ``mono_ms`` later, with the drift since the probe."""
        return self.error_ms + max(0.0, mono_ms - self.taken_mono_ms) * DRIFT_PPM / 1e6


class BrokerClock:
    """Keeps :func:`now_ms` on the broker's clock by probing the ``clock`` topic."""

    def __init__(
        self,
        kafka: KafkaSettings,
        probe_interval_s: float = 10.0,
        samples_kept: int = 8,
        service: str = "kafkron",
    ) -> None:
        self.topic = TopicNames(kafka.namespace).name(CLOCK)
        self.probe_interval_s = probe_interval_s
        self._samples: list[ClockSample] = []
        self._samples_kept = samples_kept
        self._producer = Producer(
            kafka.client_config(
                **{"linger.ms": 0, "acks": 1, "client.id": f"{service}-clock"},
            )
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported_skew_ms: int | None = None
        self._failure_reported = False
        self.error_ms: float | None = None
        """The current error bound in ms; None while the host's own clock is in use."""

    def start(self, first_probe_timeout_s: float = 5.0) -> BrokerClock:
        """Probe twice (the first one also connects, so its round trip is long) before the
        service starts, so that it starts on the broker's clock; then every interval."""
        if self.probe(first_probe_timeout_s) is not None:
            self.probe(first_probe_timeout_s)
        self._thread = threading.Thread(target=self._run, name="broker-clock", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._producer.flush(1)

    def _run(self) -> None:
        while not self._stop.wait(self.probe_interval_s):
            self.probe(self.probe_interval_s)

    def probe(self, timeout_s: float) -> ClockSample | None:
        """One probe; applies the best recent sample. None (and logged once) on failure."""
        answer: list[tuple[KafkaError | None, Message]] = []
        sent_ns = time.monotonic_ns()
        self._producer.produce(
            self.topic, b"", partition=0, on_delivery=lambda e, m: answer.append((e, m))
        )
        self._producer.flush(timeout_s)
        acked_ns = time.monotonic_ns()
        if not answer:
            self._failed(f"no answer within {timeout_s:.1f} s")
            return None
        error, message = answer[0]
        if error is not None:
            self._failed(str(error))
            return None
        kind, broker_ms = message.timestamp()
        if kind != TIMESTAMP_LOG_APPEND_TIME:
            self._failed(
                f"topic {self.topic} is not message.timestamp.type=LogAppendTime: delete it "
                "and run 'kafkron topics' (it was not made by kafkron)"
            )
            return None
        sample = ClockSample(
            base_ms=broker_ms + 0.5 - (sent_ns + acked_ns) / 2e6,
            error_ms=(acked_ns - sent_ns) / 2e6 + 0.5,
            taken_mono_ms=acked_ns / 1e6,
        )
        self._apply(sample)
        return sample

    def _apply(self, sample: ClockSample) -> None:
        global base_ms
        self._samples = [*self._samples[-(self._samples_kept - 1) :], sample]
        mono_ms = sample.taken_mono_ms
        best = min(self._samples, key=lambda s: s.error_at(mono_ms))
        base_ms = round(best.base_ms)
        self.error_ms = best.error_at(mono_ms) + 0.5  # and the rounding
        if self._failure_reported:
            log.info("broker clock answers again on %s", self.topic)
            self._failure_reported = False
        self._report_skew()

    def _report_skew(self) -> None:
        skew_ms = host_skew_ms()
        first = self._reported_skew_ms is None
        if first or abs(skew_ms - (self._reported_skew_ms or 0)) > SKEW_WARNING_MS:
            level = logging.WARNING if abs(skew_ms) > SKEW_WARNING_MS else logging.INFO
            log.log(
                level,
                "on the broker's clock (%s): this host's clock is %+d ms from it; "
                "runs fire by the broker's clock within %.1f ms",
                self.topic,
                skew_ms,
                self.error_ms,
            )
            self._reported_skew_ms = skew_ms

    def _failed(self, why: str) -> None:
        if not self._failure_reported:
            state = (
                f"keeping the last base (error {self.error_ms:.1f} ms and growing)"
                if self.error_ms is not None
                else "this host's own clock is in use"
            )
            log.warning("broker clock probe on %s failed: %s; %s", self.topic, why, state)
            self._failure_reported = True


@contextmanager
def broker_clock(kafka: KafkaSettings, service: str) -> Iterator[BrokerClock]:
    """Run the process on the broker's clock while the block runs (a service's main)."""
    probes = BrokerClock(kafka, kafka.clock_probe_interval_s, service=service).start()
    try:
        yield probes
    finally:
        probes.close()
