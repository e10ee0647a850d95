"""Fixtures shared by the executor's Kafka tests (a module may override them)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from streams.settings import KafkaSettings

from .test_loop_kafka import OUTPUTS, Calls
from .test_service_kit import TopicReader


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def reader(topics: KafkaSettings) -> Iterator[TopicReader]:
    """The executor's outputs (results, retries, dead letters), read committed."""
    outputs = TopicReader(topics, OUTPUTS)
    yield outputs
    outputs.close()
