"""Pages through the job indexes: every match once, in job id order, whatever the limit and
the scan budget, by a scan of the rows without filters or by one scan of any of the filter's
terms (hypothesis against a brute-force filter; RocksDB is real, on tmp_path)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict

from services.ingest.job_index import (
    INDEX,
    JobFilter,
    decode_cursor,
    encode_cursor,
    index_key,
    page_of_matches,
    terms_of,
)

JOB = b"j\0"
IDS = st.text(alphabet="abc-.9", min_size=1, max_size=4)
JOBS = st.dictionaries(
    IDS,
    st.tuples(
        st.sampled_from(["SCHEDULED", "PAUSED"]),
        st.sampled_from(["t1", "t2"]),
        st.dictionaries(st.sampled_from(["team", "env"]), st.sampled_from(["a", "b"])),
    ),
    max_size=40,
)
FILTERS = st.builds(
    JobFilter,
    status=st.sampled_from([None, "SCHEDULED", "PAUSED"]),
    tenant=st.sampled_from([None, "t1", "t2"]),
    handler=st.sampled_from([None, "x.y", "x.z"]),
    labels=st.lists(
        st.tuples(st.sampled_from(["team", "env"]), st.sampled_from(["a", "b"])), max_size=2
    ).map(tuple),
    id_prefix=st.sampled_from(["", "a", "ab", "b.", "c-9", "zz"]),
)


def matches(fields: tuple[str, str, dict[str, str]], where: JobFilter) -> bool:
    status, tenant, labels = fields
    return (
        where.status in (None, status)
        and where.tenant in (None, tenant)
        and where.handler in (None, "x.y")
        and all(labels.get(k) == v for k, v in where.labels)
    )


def has_prefix(job_id: str, where: JobFilter) -> bool:
    return job_id.startswith(where.id_prefix)


@settings(max_examples=150, deadline=None)
@given(
    jobs=JOBS,
    id_prefix=st.sampled_from(["", "a", "ab", "b.", "c-9", "zz"]),
    limit=st.integers(1, 7),
    budget=st.integers(1, 30),
)
def test_unfiltered_pages_list_every_job_once_in_order_with_its_row(
    jobs: dict[str, tuple[str, str, dict[str, str]]], id_prefix: str, limit: int, budget: int
) -> None:
    """``page_of_matches`` over a table of rows, no terms: the rows come from the scan."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Rdict(str(Path(tmp) / "db"), options=Options(raw_mode=True))
        try:
            for job_id in jobs:
                db[JOB + job_id.encode()] = b"row of " + job_id.encode()
            listed: list[str] = []
            rows: list[bytes] = []
            position = b""
            for _ in range(1000):
                ids, following = page_of_matches(
                    db.iter(), JOB, frozenset(), position, limit, budget, id_prefix.encode(), rows
                )
                assert len(ids) <= limit
                listed += ids
                if following is None:
                    break
                position = decode_cursor(encode_cursor(following))
            assert listed == sorted(j for j in jobs if j.startswith(id_prefix))
            assert rows == [b"row of " + j.encode() for j in listed]
        finally:
            db.close()


@settings(max_examples=150, deadline=None)
@given(
    jobs=JOBS,
    where=FILTERS.filter(lambda w: bool(w.terms())),
    limit=st.integers(1, 7),
    budget=st.integers(1, 30),
    driver=st.integers(0, 4),
)
def test_one_scan_of_any_term_lists_every_match_once_in_order(
    jobs: dict[str, tuple[str, str, dict[str, str]]],
    where: JobFilter,
    limit: int,
    budget: int,
    driver: int,
) -> None:
    """``page_of_matches`` scanning any of the filter's terms (values: term lists)."""
    with tempfile.TemporaryDirectory() as tmp:
        db = Rdict(str(Path(tmp) / "db"), options=Options(raw_mode=True))
        try:
            for job_id, (status, tenant, labels) in jobs.items():
                job = {"tenant": tenant, "handler": "x.y", "labels": labels}
                terms = terms_of(job, status)
                for term in terms:
                    db[index_key(term, job_id)] = b"".join(terms)
            terms = where.terms()
            scanned = terms[driver % len(terms)]
            listed: list[str] = []
            position = b""
            for _ in range(1000):
                ids, following = page_of_matches(
                    db.iter(),
                    INDEX + scanned,
                    frozenset(terms) - {scanned},
                    position,
                    limit,
                    budget,
                    where.id_prefix.encode(),
                )
                assert len(ids) <= limit
                listed += ids
                if following is None:
                    break
                position = decode_cursor(encode_cursor(following))
            expected = sorted(
                j for j, fields in jobs.items() if matches(fields, where) and has_prefix(j, where)
            )
            assert listed == expected
        finally:
            db.close()
