"""Secondary indexes of the status view's jobs, and pages of job ids read through them.

Each job has one empty index key per *term* it matches: its shown status (see
:mod:`services.ingest.lifecycle`), tenant, handler and each label. A key is
``x\\0<kind:1><len:2><value><job_id>``: the length prefix keeps values apart whatever they
contain, and within one term the keys are in job id order, the order of every page.

Each index key's value is the job's whole term list (its terms joined, each
self-delimiting), and ``k\0<term>`` counts the jobs under a term. A filtered page scans the
range of its rarest term (:func:`page_of_matches`, the counts say which) and checks the other
terms on each value read with the key: one seek per page, no seek per item.

A page is the ids after a position, in job id order (:func:`page_of_matches`): a scan of
the pre-rendered rows' keys without filters, else one scan of a term as above. The cursor
is the position where the next page starts (the last id plus ``\\0``, or the next match),
so paging is stable under concurrent writes: a job created meanwhile lands before the
cursor (never seen) or after it (seen once), and no other job moves or repeats. Every page
is bounded: after ``budget`` keys read it answers what it found with a cursor that resumes
there (a page may hold fewer than ``limit`` items and still have a next one).
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

INDEX = b"x\0"
TERM_COUNT = b"k\0"
STATUS, TENANT, HANDLER, LABEL = "s", "t", "h", "l"
_LEN = struct.Struct(">H")
PAGE_BUDGET = 20_000
"""Seeks and steps one page may take before it answers with what it found."""


class InvalidCursorError(ValueError):
    """A cursor that this API did not hand out (the error names the parameter)."""


class RawIterator(Protocol):
    """The part of a rocksdict iterator pages use."""

    def seek(self, key: bytes) -> None: ...
    def valid(self) -> bool: ...
    def key(self) -> Any: ...
    def value(self) -> Any: ...
    def next(self) -> None: ...


@lru_cache(maxsize=65_536)
def term(kind: str, value: str) -> bytes:
    """The index term of ``kind`` (``STATUS``...) and its value (cached: tenants, handlers
    and labels repeat across jobs, and every create computes its terms)."""
    raw = value.encode()
    return kind.encode() + _LEN.pack(len(raw)) + raw


def label_term(key: str, value: str) -> bytes:
    """The term of one label (label keys never contain ``\\0``)."""
    return term(LABEL, f"{key}\0{value}")


def terms_of(job: Mapping[str, Any], shown_status: str) -> list[bytes]:
    """Every term a Job record with this shown status matches."""
    found = [
        term(STATUS, shown_status),
        term(TENANT, job["tenant"]),
        term(HANDLER, job["handler"]),
    ]
    found += [label_term(k, v) for k, v in sorted(job["labels"].items())]
    return found


@lru_cache(maxsize=65_536)
def terms_in(joined: bytes) -> frozenset[bytes]:
    """The terms of an index value (``b"".join`` of a job's terms), cached: jobs share
    their tenant, handler, labels and status, so few term lists repeat across pages."""
    found = []
    at = 0
    while at < len(joined):
        end = at + 1 + _LEN.size + _LEN.unpack_from(joined, at + 1)[0]
        found.append(joined[at:end])
        at = end
    return frozenset(found)


def index_key(term_bytes: bytes, job_id: str) -> bytes:
    """The index key of ``job_id`` under one term."""
    return INDEX + term_bytes + job_id.encode()


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What ``GET /api/jobs`` filters by; a job matches all that are set (``id_prefix``:
    its id starts with it, a range of the job id order every page is in)."""

    status: str | None = None
    tenant: str | None = None
    handler: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    id_prefix: str = ""

    def terms(self) -> list[bytes]:
        given = ((STATUS, self.status), (TENANT, self.tenant), (HANDLER, self.handler))
        found = [term(kind, value) for kind, value in given if value is not None]
        return found + [label_term(k, v) for k, v in self.labels]


def encode_cursor(position: bytes) -> str:
    """The opaque cursor of a position (a job id, or one plus ``\\0``)."""
    return base64.urlsafe_b64encode(position).decode().rstrip("=")


def decode_cursor(cursor: str, *, min_length: int = 1, text: bool = True) -> bytes:
    """The position of a cursor (UTF-8 when ``text``); raises ``InvalidCursorError``."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        if text:
            raw.decode()
    except (binascii.Error, ValueError):
        raise InvalidCursorError("cursor is not one this API returned") from None
    if not min_length <= len(raw) <= 400:
        raise InvalidCursorError("cursor is not one this API returned")
    return raw


def _position(it: RawIterator, prefix: bytes, id_prefix: bytes) -> bytes | None:
    """The job id the iterator is at under ``prefix`` and in the ``id_prefix`` range, or
    None past them (every later id is past them too)."""
    if not it.valid():
        return None
    key = bytes(it.key())
    if not key.startswith(prefix):
        return None
    position = key[len(prefix) :]
    return position if position.startswith(id_prefix) else None


def page_of_matches(
    iterator: RawIterator,
    prefix: bytes,
    others: frozenset[bytes],
    start: bytes,
    limit: int,
    budget: int = PAGE_BUDGET,
    id_prefix: bytes = b"",
    values: list[bytes] | None = None,
) -> tuple[list[str], bytes | None]:
    """Up to ``limit`` job ids at or after ``start`` (and starting with ``id_prefix``) under
    ``prefix`` and the terms ``others``, in order, and the position of the next page (None
    at the end), by one scan of ``prefix``: a term's (``INDEX + term``), whose values are
    each job's term list, a job matching when ``others`` are all in it; or, with no
    ``others``, any table keyed ``<prefix><job_id>``. Every key read counts against
    ``budget``; the cursor is the next match, or where the scan stopped. With ``values``,
    the value of each id's key is appended to it (what the scan already holds: no get of
    its own)."""
    found: list[str] = []
    matches: dict[bytes, bool] = {}  # term list -> whether it holds ``others``
    iterator.seek(prefix + max(start, id_prefix))
    read = 0
    while True:
        position = _position(iterator, prefix, id_prefix)
        if position is None:
            return found, None
        if read == budget:
            return found, position
        read += 1
        if others:
            joined = bytes(iterator.value())
            match = matches.get(joined)
            if match is None:
                match = matches[joined] = others <= terms_in(joined)
            if not match:
                iterator.next()
                continue
        if len(found) == limit:
            return found, position  # one more exists: the next page starts at it
        found.append(position.decode())
        if values is not None:
            values.append(bytes(iterator.value()))
        iterator.next()
