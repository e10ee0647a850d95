"""KeySpace: each view of one real store transaction behaves as its own store.

Stored keys (written to RocksDB first) and pending writes of the transaction, in several key
spaces whose keys hold any bytes (0x00, 0xff, the other spaces' prefixes): gets, range reads
(order, bounds, limits, deletes hiding stored keys) and deletes of one view equal a model of
that logical store alone, and never touch another's.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.state.key_space import KeySpace
from streams.state.partition import PartitionStore

SPACES = [b"a", b"b", b"\xff"]
KEYS = st.binary(max_size=3) | st.sampled_from([b"", b"\x00", b"\xff", b"a", b"b\xff", b"\xff\xff"])
VALUES = st.sampled_from([b"v1", b"v2", b""])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(SPACES), KEYS, VALUES),
        st.tuples(st.just("delete"), st.sampled_from(SPACES), KEYS, st.none()),
        st.tuples(st.just("delete_many"), st.sampled_from(SPACES), st.lists(KEYS, max_size=3)),
    ),
    max_size=25,
)


Op = tuple[Any, ...]


def _apply(model: dict[bytes, dict[bytes, bytes]], views: dict[bytes, KeySpace], op: Op) -> None:
    kind, space = op[0], op[1]
    if kind == "set":
        views[space].set(op[2], op[3])
        model[space][op[2]] = op[3]
    elif kind == "delete":
        views[space].delete(op[2])
        model[space].pop(op[2], None)
    else:
        views[space].delete_many(list(op[2]))
        for key in op[2]:
            model[space].pop(key, None)


@settings(max_examples=100, deadline=None)
@given(
    stored=OPS,
    pending=OPS,
    ranges=st.lists(st.tuples(KEYS, KEYS, st.integers(1, 6)), min_size=1, max_size=6),
)
def test_each_key_space_is_its_own_store(
    stored: list[Op], pending: list[Op], ranges: list[tuple[bytes, bytes, int]]
) -> None:
    path = Path(tempfile.mkdtemp(prefix="key-space-"))
    store = PartitionStore(path, 0, "ns.changelog.g.state")
    try:
        model: dict[bytes, dict[bytes, bytes]] = {space: {} for space in SPACES}
        first = store.begin()
        views = {space: KeySpace(first, space) for space in SPACES}
        for op in stored:
            _apply(model, views, op)
        store.write(first._updates, 1)  # what a flush writes: now in RocksDB
        txn = store.begin()
        views = {space: KeySpace(txn, space) for space in SPACES}
        views[SPACES[0]].prefetch([key for key, _, _ in ranges])
        for op in pending:
            _apply(model, views, op)
        for space, view in views.items():
            for key in {key for key, _, _ in ranges} | model[space].keys():
                assert view.get(key) == model[space].get(key)
            for start, end, limit in ranges:
                expected = sorted((k, v) for k, v in model[space].items() if start <= k < end)
                assert view.iter_range(start, end, limit) == expected[:limit]
            everything = view.iter_range(b"", b"\xff" * 4, 10_000)
            assert everything == sorted(model[space].items())
    finally:
        store.close()
        shutil.rmtree(path)


def test_a_prefix_is_one_byte() -> None:
    txn = PartitionStore.__new__(PartitionStore)
    with pytest.raises(ValueError, match="one byte"):
        KeySpace(txn.begin(), b"ab")
    with pytest.raises(ValueError, match="one byte"):
        KeySpace(txn.begin(), b"")
