"""A status view directory is one process's: a second opener gets a clear error, and the local
cluster's demo client never takes the API's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from services.demo import demo_settings
from services.ingest.exceptions import ViewInUseError
from services.ingest.settings import IngestSettings
from services.ingest.view_store import ViewStore
from streams.codec import Codec
from streams.settings import KafkaSettings
from tests.rocksdb_holder import held_open


def test_a_view_open_in_another_process_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "ingest-view"
    with held_open(path), pytest.raises(ViewInUseError) as error:
        ViewStore(path, Codec.from_directory(), recent_executions=4)
    assert str(path) in str(error.value)
    assert "KAFKRON_INGEST_VIEW_DIR" in str(error.value)
    deadline = time.monotonic() + 10
    while True:  # the lock goes with the process
        try:
            ViewStore(path, Codec.from_directory(), recent_executions=4).close()
            break
        except ViewInUseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_the_demo_client_has_a_view_of_its_own(tmp_path: Path) -> None:
    kafka = KafkaSettings(state_dir=tmp_path)
    demo = demo_settings(kafka).view_path
    assert demo != IngestSettings(kafka=kafka).view_path
    assert demo.parent == tmp_path
