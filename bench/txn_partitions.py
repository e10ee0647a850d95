"""A transaction's commit time against the number of partitions it writes (issue 17).

Run: ``.venv/bin/python -m bench.txn_partitions [--bootstrap HOST:PORT] [--transactions N]``

One transactional producer (librdkafka's defaults, as the processors' producer) writes one
100-byte record to each of P partitions of a fresh topic, flushes and commits; P cycles
through ``--partitions`` twice, alternating, so a noisy machine hits every size alike.
Prints p50/p90 of the flush (produce requests answered) and of the whole transaction.

Why: librdkafka sends one ProduceRequest per partition and an idempotent producer keeps at
most 5 in flight per broker connection, so a flush waits about ``P / 5`` produce round trips
in sequence. A processor's transaction writes its outputs and every changelog partition a
batch touched (the dag processor in a burst: 12 ``dag-releases`` + 36 changelog partitions),
which a bare 4-partition transaction does not show.
"""

from __future__ import annotations

import argparse
import time
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

_RECORD = b"x" * 100
_TIMEOUT_S = 30.0


def percentile(sorted_values: list[float], fraction: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def transaction_times_ms(
    producer: Producer, topic: str, partitions: int, transactions: int
) -> tuple[list[float], list[float]]:
    """(flush ms, whole transaction ms) of ``transactions`` transactions, one record to each
    of partitions 0..``partitions``-1 of ``topic``."""
    flush_ms: list[float] = []
    total_ms: list[float] = []
    for _ in range(transactions):
        began = time.perf_counter()
        producer.begin_transaction()
        for partition in range(partitions):
            producer.produce(topic, _RECORD, b"k", partition=partition)
        produced = time.perf_counter()
        producer.flush(_TIMEOUT_S)
        flushed = time.perf_counter()
        producer.commit_transaction(_TIMEOUT_S)
        flush_ms.append((flushed - produced) * 1000)
        total_ms.append((time.perf_counter() - began) * 1000)
    return flush_ms, total_ms


def run(bootstrap: str, sizes: list[int], transactions: int) -> None:
    topic = f"bench-txn-partitions-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, max(sizes), 1)]).values():
        future.result()
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": topic})
    try:
        producer.init_transactions(_TIMEOUT_S)
        transaction_times_ms(producer, topic, max(sizes), 5)  # connections, metadata
        print(f"{transactions} transactions per size, one record per partition")
        print(f"  {'partitions':>10}  {'flush p50/p90 (ms)':>20}  {'transaction p50/p90':>20}")
        for size in sizes + sizes:
            flush, total = (
                sorted(v) for v in transaction_times_ms(producer, topic, size, transactions)
            )
            print(
                f"  {size:>10}  {percentile(flush, 0.5):>9.1f} / {percentile(flush, 0.9):<8.1f}"
                f"  {percentile(total, 0.5):>9.1f} / {percentile(total, 0.9):<8.1f}"
            )
    finally:
        producer.flush(_TIMEOUT_S)
        for future in admin.delete_topics([topic], operation_timeout=30).values():
            future.result()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--partitions", type=int, nargs="+", default=[4, 12, 24, 48])
    parser.add_argument("--transactions", type=int, default=40, help="per size and round")
    args = parser.parse_args()
    run(args.bootstrap, args.partitions, args.transactions)


if __name__ == "__main__":
    main()
