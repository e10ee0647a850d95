"""``DedupStore.lookup_many`` reads what ``lookup`` reads, id by id, in every state of a
partition: entries recorded and not committed, committed ones, inside a commit (between
prepare and flush) and after an aborted one. Real RocksDB in a temporary folder."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from services.executor.dedup import DedupEntry, Progress

from .test_dedup_v3 import PARTITION, Owner

IDS = [f"job-{i}@1" for i in range(8)]
entries = st.builds(
    DedupEntry, st.sampled_from(list(Progress)), st.integers(1, 5), st.integers(0, 10**13)
)
# ("record", id index, entry) | ("commit",) | ("prepare",) | ("flush",) | ("discard",)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("record"), st.integers(0, len(IDS) - 1), entries),
        st.sampled_from([("commit",), ("prepare",), ("flush",), ("discard",)]),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    steps=steps,
    asked=st.lists(st.sampled_from([*IDS, "never@1"]), max_size=12),
    layout=st.sampled_from(["v3", "v2", "unexpiring"]),
)
def test_lookup_many_reads_what_lookup_reads(
    steps: list[tuple[object, ...]], asked: list[str], layout: str
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="dedup-lookup-many-"))
    try:
        owner = Owner(folder)
        dedup = owner.open(
            entries_in_index=layout == "v3", retention_ms=None if layout == "unexpiring" else 10**6
        )
        preparing = False
        for step in steps:
            if step[0] == "record":
                _, index, entry = step
                assert isinstance(index, int) and isinstance(entry, DedupEntry)
                dedup.record(PARTITION, IDS[index], entry)
            elif step[0] == "commit" and not preparing:
                owner.commit({})
            elif step[0] == "prepare" and not preparing:
                dedup.prepare(owner.producer)  # type: ignore[arg-type]
                preparing = True
            elif step[0] == "flush" and preparing:
                dedup.flush(owner.producer)  # type: ignore[arg-type]
                preparing = False
            elif step[0] == "discard":
                dedup.discard()
                preparing = False
            expected = [dedup.lookup(PARTITION, execution_id) for execution_id in asked]
            assert dedup.lookup_many(PARTITION, asked) == expected
    finally:
        if owner.dedup is not None:
            owner.dedup.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_lookup_many_of_nothing_is_empty(tmp_path: Path) -> None:
    dedup = Owner(tmp_path).open(entries_in_index=True)
    assert dedup.lookup_many(PARTITION, []) == []
