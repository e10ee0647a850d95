"""A counter processor for crash tests: counts records per key and emits the running total.

Run as ``python -m tests.streams.processor_counter_app --bootstrap ... --namespace ...``.
It prints one JSON line per event (``ready``/``first``/``revoked``/``stopped``) with the wall
time, so a test can see when partitions move. SIGTERM stops it cleanly (commit, leave group).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from streams.processing import ProcessorContext
from streams.processor import Processor, ProcessorOptions
from streams.settings import KafkaSettings

STORE = "counts"


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}), flush=True)


class Counter:
    """Counts per key in store ``counts`` and produces ``key -> total`` to the output topic."""

    def __init__(self, output_topic: str) -> None:
        self.output_topic = output_topic
        self.first_seen: set[int] = set()

    def on_record(
        self,
        ctx: ProcessorContext,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
    ) -> None:
        assert key is not None
        counts = ctx.store(STORE)
        total = int.from_bytes(counts.get(key) or bytes(8), "big") + 1
        counts.set(key, total.to_bytes(8, "big"))
        ctx.produce(self.output_topic, key, str(total).encode())
        if partition not in self.first_seen:
            self.first_seen.add(partition)
            emit("first", partition=partition)

    def on_punctuate(self, ctx: ProcessorContext, partition: int, now_ms: int) -> None:
        pass

    def on_assigned(self, partition: int) -> None:
        emit("ready", partition=partition)

    def on_revoked(self, partition: int) -> None:
        self.first_seen.discard(partition)
        emit("revoked", partition=partition)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "namespace", "group", "instance", "state-dir", "input", "output"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--commit-interval-ms", type=int, default=500)
    parser.add_argument("--static", action="store_true", help="use group.instance.id")
    args = parser.parse_args(argv)
    # Assignments, restores, aborts and every commit's positions: the evidence a failed count
    # is explained with (the test prints the tail of this log).
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s"
    )
    logging.getLogger("streams.checkpoint").setLevel(logging.DEBUG)
    settings = KafkaSettings(
        bootstrap_servers=args.bootstrap,
        namespace=args.namespace,
        partitions=4,
        state_dir=Path(args.state_dir),
    )
    processor = Processor(
        settings,
        args.group,
        args.instance,
        [args.input],
        [STORE],
        Counter(args.output),
        ProcessorOptions(
            commit_interval_ms=args.commit_interval_ms,
            batch_size=500,
            static_membership=args.static,
        ),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    emit("starting")
    processor.run(stop)
    emit("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
