"""Which cluster a command talks to: flags, then ``KAFKRON_*`` environment, then the local
profile ``kafkron up`` wrote, then the defaults of a local cluster. The API token (``--token``,
``KAFKRON_TOKEN``, the profile's ``token``) is resolved the same way; there is no default.

Each resolved value remembers where it came from, so an error can say which setting to fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.operator_cli.profile import Profile
from streams.settings import KafkaSettings

DEFAULT_API_URL = "http://127.0.0.1:8080"
_KAFKA_DEFAULTS = KafkaSettings.model_fields


@dataclass(frozen=True)
class Setting:
    """One resolved value and where it came from (``--api``, ``KAFKRON_API_URL``, ...)."""

    value: str
    source: str

    def __str__(self) -> str:
        return f"{self.value} (from {self.source})"


@dataclass(frozen=True)
class Given:
    """A value from a flag or the environment (None: neither gave one) and which it was."""

    value: str | None
    source: str


@dataclass(frozen=True)
class Target:
    """The cluster a command talks to: its REST API and its Kafka bootstrap and namespace,
    and the bearer token for the API (None: send none)."""

    api_url: Setting
    bootstrap_servers: Setting
    namespace: Setting
    token: Setting | None = None

    def kafka_settings(self, base: KafkaSettings) -> KafkaSettings:
        """``base`` (librdkafka extras, partitions from the environment) aimed at this cluster."""
        return base.model_copy(
            update={
                "bootstrap_servers": self.bootstrap_servers.value,
                "namespace": self.namespace.value,
            }
        )


def resolve_target(
    *,
    api_url: Given,
    bootstrap_servers: Given,
    namespace: Given,
    profile: Profile | None,
    profile_path: Path,
    token: Given = Given(None, "--token"),
) -> Target:
    """Each value from its flag or environment variable when given, else the profile, else
    the default of a local cluster."""

    def pick(given: Given, from_profile: str | None, default: str) -> Setting:
        if given.value:
            return Setting(given.value, given.source)
        if from_profile:
            return Setting(from_profile, f"the profile {profile_path}")
        return Setting(default, "the default")

    api = pick(api_url, profile.api_url if profile else None, DEFAULT_API_URL)
    # The profile's token goes only to the profile's API, never to one a flag names.
    profile_api = api.source.startswith("the profile")
    secret = pick(token, profile.token if profile and profile_api else None, "")
    return Target(
        api_url=Setting(api.value.rstrip("/"), api.source),
        bootstrap_servers=pick(
            bootstrap_servers,
            profile.bootstrap_servers if profile else None,
            str(_KAFKA_DEFAULTS["bootstrap_servers"].default),
        ),
        namespace=pick(
            namespace,
            profile.namespace if profile else None,
            str(_KAFKA_DEFAULTS["namespace"].default),
        ),
        token=secret if secret.value else None,
    )
