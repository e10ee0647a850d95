"""Read kafkron's ``job-results`` without kafkron: fastavro, confluent-kafka and the .avsc files.

What any other language does (docs/wire-format.md): strip the 10-byte header (``C3 01`` and
the writer schema's 8-byte little-endian CRC-64-AVRO fingerprint), find the writer schema by
its fingerprint among the shipped ``.avsc`` files, and decode the body with it, resolving to
the newest ``execution_result.vN.avsc`` as the reader schema. Prints one JSON object per
result: the record plus its ``partition``, ``offset`` and ``key``.

    python examples/plain_avro_consumer.py --bootstrap 127.0.0.1:9092 \\
        --topic kafkron.job-results --schemas schemas/ [--max 1000] [--idle-s 5]

It imports nothing from kafkron on purpose: this is the proof that the format is the spec's.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from fastavro import parse_schema, schemaless_reader
from fastavro.schema import fingerprint, to_parsing_canonical_form

MAGIC = b"\xc3\x01"


def load_schemas(folder: Path) -> tuple[dict[bytes, dict[str, Any]], dict[str, Any]]:
    """Writer schemas by fingerprint (every .avsc), and the newest ExecutionResult schema."""
    by_fingerprint: dict[bytes, dict[str, Any]] = {}
    for path in sorted(folder.glob("*.avsc")):
        schema = json.loads(path.read_text(encoding="utf-8"))
        canonical = to_parsing_canonical_form(schema)
        by_fingerprint[bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))] = parse_schema(schema)
    newest = max(
        folder.glob("execution_result.v*.avsc"),
        key=lambda p: int(p.name.split(".v")[1].split(".")[0]),
    )
    return by_fingerprint, parse_schema(json.loads(newest.read_text(encoding="utf-8")))


def decode(value: bytes, writers: dict[bytes, dict[str, Any]], reader: dict[str, Any]) -> Any:
    """One single-object-encoded value as a dict (resolved to ``reader``)."""
    if value[:2] != MAGIC:
        raise ValueError(f"not Avro single-object encoding: starts {value[:2].hex()}")
    writer = writers.get(value[2:10])
    if writer is None:
        raise ValueError(f"unknown writer schema fingerprint {value[2:10].hex()}")
    return schemaless_reader(io.BytesIO(value[10:]), writer, reader)


def main() -> None:
    """Print every result on the topic as a JSON line, until ``--max`` or ``--idle-s``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--schemas", required=True, type=Path)
    parser.add_argument("--max", type=int, default=1_000_000)
    parser.add_argument("--idle-s", type=float, default=5.0)
    args = parser.parse_args()
    writers, reader = load_schemas(args.schemas)
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": f"plain-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    partitions = consumer.list_topics(args.topic, timeout=30).topics[args.topic].partitions
    consumer.assign([TopicPartition(args.topic, p, 0) for p in sorted(partitions)])
    printed = 0
    while printed < args.max:
        messages = consumer.consume(num_messages=500, timeout=args.idle_s)
        if not messages:
            break
        for message in messages:
            if message.error() is not None:
                continue
            record = decode(message.value(), writers, reader)
            key = message.key()
            record.update(
                partition=message.partition(),
                offset=message.offset(),
                key=key.decode() if key is not None else None,
            )
            sys.stdout.write(json.dumps(record) + "\n")
            printed += 1
    consumer.close()


if __name__ == "__main__":
    main()
