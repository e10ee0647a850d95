"""A status view store of another layout is emptied on open (rebuilt from the topics)."""

from __future__ import annotations

from pathlib import Path

from rocksdict import Options, Rdict

from services.ingest.view_store import ViewStore
from streams.codec import Codec

CODEC = Codec.from_directory()


def test_a_store_of_the_old_layout_is_emptied_and_a_current_one_kept(tmp_path: Path) -> None:
    path = tmp_path / "view"
    old = Rdict(str(path), options=Options(raw_mode=True))
    old[b"e\0job-1"] = b'[{"execution_id":"job-1@1"}]'  # the old per-job list of executions
    old[b"o\0kafkron.jobs\0" + b"0"] = (42).to_bytes(8, "big")
    old.close()
    store = ViewStore(path, CODEC, recent_executions=20)
    try:
        assert store.offsets() == {} and store.get(b"e\0job-1") is None  # reread from offset 0
        store.write({b"o\0kafkron.jobs\0" + b"0": (7).to_bytes(8, "big")})
    finally:
        store.close()
    reopened = ViewStore(path, CODEC, recent_executions=20)
    try:
        assert reopened.offsets() == {("kafkron.jobs", 0): 7}
    finally:
        reopened.close()


def test_a_format_2_store_without_the_newest_execution_keys_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "view"
    old = Rdict(str(path), options=Options(raw_mode=True))
    old[b"m\0format"] = b"2"  # before l\0<job_id> (each job's newest execution) existed
    old[b"h\0job-1\0" + (1 << 63).to_bytes(8, "big") + b"job-1@0"] = b'{"status":"SUCCEEDED"}'
    old[b"o\0kafkron.job-results\0" + b"0"] = (42).to_bytes(8, "big")
    old.close()
    store = ViewStore(path, CODEC, recent_executions=20)
    try:
        assert store.offsets() == {} and store.executions("job-1") == []  # reread from 0
    finally:
        store.close()
