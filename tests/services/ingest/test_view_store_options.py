"""The status view's RocksDB options: a Bloom filter in each table file, the block cache
of the settings (services.ingest.view_store.view_options)."""

from __future__ import annotations

import re
from pathlib import Path

from services.ingest.view_store import ViewStore
from streams.codec import Codec


def _filter_block_bytes(store: ViewStore) -> int:
    properties = store._db.property_value("rocksdb.aggregated-table-properties")
    found = re.search(r"filter block size=(\d+)", properties or "")
    assert found, properties
    return int(found.group(1))


def test_table_files_carry_a_bloom_filter_and_the_cache_is_the_settings(tmp_path: Path) -> None:
    store = ViewStore(tmp_path / "view", Codec.from_directory(), recent_executions=4,
                      block_cache_mb=48)  # fmt: skip
    try:
        for i in range(1000):
            store._db.put(f"j\0job-{i:04d}".encode(), b"x" * 50)
        store._db.flush()
        assert _filter_block_bytes(store) > 1000  # ~10 bits for each of 1000 keys
        assert store._db.property_int_value("rocksdb.block-cache-capacity") == 48 << 20
        assert store.get(b"j\0job-0007") == b"x" * 50
        assert store.get(b"j\0job-9999") is None
    finally:
        store.close()
