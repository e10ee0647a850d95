"""How a produce call leaves a record's partition to the producer's partitioner."""

from __future__ import annotations

PARTITION_UA = -1
"""librdkafka's ``RD_KAFKA_PARTITION_UA`` ("unassigned"): as ``Producer.produce``'s
``partition``, the producer's partitioner (``murmur2_random`` in kafkron's producers, Java's
choice) picks the partition from the record's key."""
