"""keys.py's ordering promises hold through the key spaces of the dag's one store.

Every logical store is filled at once in one real RocksDB transaction (part stored, part
pending), so a range read of one key space would show another's keys if a view leaked.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from services.dag import keys
from services.dag.scope import KEY_SPACES
from streams.state.key_space import KeySpace
from streams.state.partition import PartitionStore

IDS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=6)


def _fill(txn_views: dict[str, KeySpace], ups: list[str], ids: list[str], dues: list[int]) -> None:
    for upstream in ups:
        for dependent in ids:
            txn_views["edges"].set(keys.edge_key(upstream, dependent), b"")
        txn_views["nodes"].set(upstream.encode(), b"job")
        txn_views["ends"].set(keys.end_key(upstream, 5), b"SUCCEEDED")
        for due_ms in dues:
            run = keys.run_key(upstream, due_ms)
            txn_views["runs"].set(run, b"run")
            txn_views["deadlines"].set(keys.deadline_key(due_ms, run), keys.MISS)


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(IDS, min_size=1, max_size=5, unique=True),
    dues=st.lists(st.integers(0, 2**40), min_size=1, max_size=5, unique=True),
    now_ms=st.integers(0, 2**40),
)
def test_dependents_and_due_deadlines_through_the_key_spaces(
    tmp_path_factory: object, ids: list[str], dues: list[int], now_ms: int
) -> None:
    path: Path = tmp_path_factory.mktemp("dag-keys")  # type: ignore[attr-defined]
    store = PartitionStore(path, 0, "k.changelog.k.dag.state")
    try:
        first = store.begin()
        _fill({name: KeySpace(first, p) for name, p in KEY_SPACES.items()}, ids[:2], ids, dues)
        store.write(first._updates, 1)
        txn = store.begin()
        views = {name: KeySpace(txn, p) for name, p in KEY_SPACES.items()}
        _fill(views, ids[2:], ids, dues)
        for upstream in ids:
            found = views["edges"].iter_range(*keys.dependents_range(upstream), 1_000)
            dependents = [keys.dependent_of_edge(k, upstream) for k, _ in found]
            assert dependents == sorted(ids, key=str.encode)
            ends = views["ends"].iter_range(*keys.ends_range(upstream), 1_000)
            assert [keys.split_run_key(k) for k, _ in ends] == [(upstream, 5)]
        due = views["deadlines"].iter_range(*keys.deadlines_until(now_ms), 1_000)
        times = [keys.split_deadline_key(k)[0] for k, _ in due]
        assert times == sorted(d for d in dues for _ in ids if d <= now_ms)  # the wheel's order
        assert all(value == keys.MISS for _, value in due)
    finally:
        store.close()
