"""One log format for every kafkron process: text for people, JSON lines for machines.

:func:`configure_logging` is called once by each process's entry point. It installs one
handler on the root logger, so kafkron's loggers, uvicorn's (the API) and librdkafka's
(every client built from :meth:`streams.settings.KafkaSettings.client_config` logs through
the ``librdkafka`` logger instead of printing ``%4|...`` lines to stderr) share it.

``KAFKRON_LOG_FORMAT=json`` writes one JSON object per line: ``ts`` (ISO 8601, UTC),
``level``, ``service``, ``logger``, ``msg``, and the fields a call passes with ``extra``
(:data:`FIELDS`: job and execution ids, attempt, topic, partition), plus ``exc`` for a traceback.
Logs never carry payloads: callers pass ids, never record values.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Literal

import orjson
from pydantic_settings import BaseSettings, SettingsConfigDict

FIELDS = ("job_id", "execution_id", "attempt", "topic", "partition", "offset", "reason")
"""Fields of a record's ``extra`` that the JSON format writes as fields of their own."""
TEXT_FORMAT = "%(asctime)s %(levelname)s %(service)s %(name)s: %(message)s"


class LogSettings(BaseSettings):
    """How a process logs: ``KAFKRON_LOG_FORMAT`` (text, json), ``KAFKRON_LOG_LEVEL``."""

    model_config = SettingsConfigDict(env_prefix="KAFKRON_LOG_", frozen=True, extra="ignore")

    format: Literal["text", "json"] = "text"
    level: str = "INFO"


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module's doc)."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, Any] = {
            "ts": _iso(record.created),
            "level": record.levelname,
            "service": getattr(record, "service", ""),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in FIELDS:
            value = record.__dict__.get(name)
            if value is not None:
                document[name] = value
        if record.exc_info:
            document["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(document, default=str).decode()


class _ServiceFilter(logging.Filter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = self.service
        return True


def configure_logging(service: str, settings: LogSettings | None = None) -> None:
    """Route every logger of this process through one handler on stderr, in the format of
    ``settings`` (read from the environment when None), each line naming ``service``."""
    settings = settings or LogSettings()
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_ServiceFilter(service))
    if settings.format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(settings.level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        named = logging.getLogger(name)
        named.handlers.clear()
        named.propagate = True


def _iso(created_s: float) -> str:
    millis = int(created_s * 1000) % 1000
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created_s)) + f".{millis:03d}Z"
