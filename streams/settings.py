"""Settings shared by every kafkron process: where Kafka is and how topics are laid out.

Read from the environment (prefix ``KAFKRON_``) only at an entry point, then passed down.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

LIBRDKAFKA_LOGGER = logging.getLogger("librdkafka")
"""Where every client's librdkafka log lines go (one format with the rest of the process)."""


class KafkaSettings(BaseSettings):
    """Kafka connection and topic layout; ``librdkafka`` passes any client option through."""

    model_config = SettingsConfigDict(env_prefix="KAFKRON_", frozen=True, extra="ignore")

    bootstrap_servers: str = "127.0.0.1:9092"
    namespace: str = "kafkron."
    partitions: int = Field(default=12, ge=1)
    replication_factor: int = Field(default=1, ge=1)
    # min.insync.replicas of the topics kafkron creates; None: 2 from a replication factor
    # of 3 (an acks=all write is on 2 brokers; one may die), else 1 (streams/admin.py).
    min_insync_replicas: int | None = Field(default=None, ge=1)
    # Extra librdkafka settings (SASL, SSL, ...) merged into every client's config.
    librdkafka: dict[str, Any] = Field(default_factory=dict)
    state_dir: Path = Path(".state")
    # How often each service reads the broker's clock (streams/clock.py).
    clock_probe_interval_s: float = Field(default=10.0, gt=0)

    def client_config(self, **overrides: Any) -> dict[str, Any]:
        """librdkafka config for any client: bootstrap, operator extras, then overrides.

        librdkafka's own log lines go to the ``librdkafka`` logger (``streams/logs.py``)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": LIBRDKAFKA_LOGGER,
        }
        config.update(self.librdkafka)
        config.update(overrides)
        return config
