"""Settings of the local Kafka broker (one node, or a local cluster of several) that kafkron
runs for development and tests."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class BrokerSettings(BaseSettings):
    """Where the local broker lives and how it starts; env prefix ``KAFKRON_BROKER_``.

    ``port`` 0 picks a free port at first start and keeps it for that home folder.
    ``count`` > 1 runs that many KRaft nodes from ``home/node-<id>`` (``infra/cluster.py``),
    node N on ``port + N - 1``; ``heap_mb`` is each node's.
    """

    model_config = SettingsConfigDict(env_prefix="KAFKRON_BROKER_", frozen=True, extra="ignore")

    home: Path = Path(".state/broker")
    # 4.2.2, not 4.3 or 4.4: from 4.3 on a single node SIGKILLed and started again skips the
    # abort markers of the transactions open at the kill (KAFKA-20734; README "Broker faults").
    kafka_version: str = "4.2.2"
    log4j_version: str = "2.25.3"
    count: int = Field(default=1, ge=1, le=9)
    port: int = Field(default=9092, ge=0, le=65535)
    controller_port: int = Field(default=0, ge=0, le=65535)
    heap_mb: int = Field(default=768, ge=256)
    # JVM flags besides the heap (split like a shell would): the garbage collector and its
    # tuning. ``KAFKRON_BROKER_JVM_OPTIONS`` replaces them, e.g. to compare collectors.
    jvm_options: str = "-XX:+UseG1GC -XX:MaxGCPauseMillis=20"
    start_timeout_s: float = Field(default=120.0, gt=0)
    stop_grace_s: float = Field(default=30.0, gt=0)
    # Where the jars go, a folder per Kafka version; shared across homes so a test broker
    # reuses the dev broker's fetch.
    libs_dir: Path = Path(".state/kafka-libs")
    # Broker properties written after infra/server.properties, replacing its keys of the same
    # name (a properties file keeps a key's last value): e.g. a test broker's second listener,
    # advertised at a proxy's address (tests/services/test_network_faults.py).
    extra_properties: dict[str, str] = Field(default_factory=dict)
    # SCRAM-SHA-512 users (name -> password) written into the storage when it is formatted
    # (kafka-storage format --add-scram), so a SASL listener's admin can log in at the first
    # start (infra/sasl.py); later users come from the admin API. None by default.
    scram_users: dict[str, str] = Field(default_factory=dict)
