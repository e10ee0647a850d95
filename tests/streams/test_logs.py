"""One log format for every process (streams/logs.py): text or JSON lines, with librdkafka's
and uvicorn's lines routed through it."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer

from streams.logs import LogSettings, configure_logging
from streams.settings import KafkaSettings


@pytest.fixture(autouse=True)
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_json_lines_carry_the_service_and_the_ids_passed_as_fields(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("timer", LogSettings(format="json"))
    logging.getLogger("services.timer.inputs").warning(
        "dead-lettered %s", "a reason", extra={"job_id": "j-1", "topic": "k.jobs", "partition": 3}
    )
    (line,) = capsys.readouterr().err.splitlines()
    document = json.loads(line)
    assert document["service"] == "timer" and document["level"] == "WARNING"
    assert document["logger"] == "services.timer.inputs"
    assert document["msg"] == "dead-lettered a reason"
    assert (document["job_id"], document["topic"], document["partition"]) == ("j-1", "k.jobs", 3)
    assert document["ts"].endswith("Z")


def test_text_lines_name_the_service_and_the_level_setting_filters(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("dag", LogSettings(level="warning"))
    logging.getLogger("x").info("hidden")
    logging.getLogger("x").error("shown")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(" ERROR dag x: shown")


def test_uvicorn_and_librdkafka_lines_go_through_the_same_handler(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("api", LogSettings(format="json"))
    logging.getLogger("uvicorn.error").info("Started server process")
    consumer = Consumer(
        KafkaSettings(bootstrap_servers="127.0.0.1:1").client_config(**{"group.id": "g"})
    )
    try:
        consumer.subscribe(["t"])
        consumer.poll(1.0)  # librdkafka's log lines are served by poll
    finally:
        consumer.close()
    documents = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert {"uvicorn.error", "librdkafka"} <= {d["logger"] for d in documents}
    assert all(d["service"] == "api" for d in documents)
