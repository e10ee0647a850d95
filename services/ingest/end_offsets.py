"""End offsets of partitions for an event loop: one ListOffsets, no thread waiting.

Keyed creates ask for the end of their ``jobs`` partitions all the time (one request per
round of about twenty creates, :mod:`services.ingest.catch_up`). ``AdminClient.list_offsets``
wraps the request in Python: it checks every argument, builds a ``concurrent.futures``
future per partition plus one for the request, and resolves them one by one on the admin
thread. Measured here, that wrapper costs 2-4 times the C call it wraps (~150-250 us of
CPU per request, taken from the API's event loop and GIL). :func:`end_offsets`
calls the C layer of the same client with a one-shot sink instead (the C layer only calls
``set_result`` or ``set_exception`` on it), and falls back to the public method when the
installed confluent-kafka does not take that call.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from typing import Any

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec

try:
    from confluent_kafka.cimpl import _AdminClientImpl

    _raw_list_offsets: Any = _AdminClientImpl.list_offsets
except (ImportError, AttributeError):  # pragma: no cover - another confluent-kafka layout
    _raw_list_offsets = None

TopicPartitionKey = tuple[str, int]
_LATEST = -1  # ListOffsets' timestamp for "the end" (OffsetSpec.latest())


class _Sink:
    """What the admin client's C layer completes: hands the outcome to the loop."""

    __slots__ = ("_loop", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.future: asyncio.Future[dict[Any, Any]] = loop.create_future()

    def set_result(self, result: dict[Any, Any]) -> None:  # the admin thread
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self._loop.call_soon_threadsafe(_settle, self.future, result, None)

    def set_exception(self, error: BaseException) -> None:  # the admin thread
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(_settle, self.future, None, error)


def _settle(
    future: asyncio.Future[dict[Any, Any]],
    result: dict[Any, Any] | None,
    error: BaseException | None,
) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result or {})


async def end_offsets(
    admin: AdminClient,
    partitions: Collection[TopicPartitionKey],
    timeout_s: float,
    isolation: IsolationLevel,
) -> dict[TopicPartitionKey, int]:
    """The end of each partition: its high watermark (every acknowledged record) with
    ``READ_UNCOMMITTED``, its last stable offset (what ``read_committed`` can read up to
    now) with ``READ_COMMITTED``. Raises ``KafkaException`` when any partition failed.
    """
    if not partitions:
        return {}
    loop = asyncio.get_running_loop()
    sink = _Sink(loop)
    request = [TopicPartition(topic, partition, _LATEST) for topic, partition in partitions]
    try:
        if _raw_list_offsets is None:
            raise TypeError("no C-level list_offsets")
        _raw_list_offsets(
            admin,
            request,
            sink,
            isolation_level_value=isolation.value,
            request_timeout=timeout_s,
        )
    except TypeError:  # pragma: no cover - the C signature changed: the public way
        return await _public_list_offsets(admin, partitions, timeout_s, isolation)
    answer = await sink.future
    offsets: dict[TopicPartitionKey, int] = {}
    for tp, info in answer.items():
        if isinstance(info, KafkaError):
            raise KafkaException(info)
        offsets[(tp.topic, tp.partition)] = info.offset
    return offsets


async def _public_list_offsets(
    admin: AdminClient,
    partitions: Collection[TopicPartitionKey],
    timeout_s: float,
    isolation: IsolationLevel,
) -> dict[TopicPartitionKey, int]:  # pragma: no cover - see end_offsets
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets(
        {TopicPartition(t, p): latest for t, p in partitions},
        isolation_level=isolation,
        request_timeout=timeout_s,
    )
    wrapped = [asyncio.wrap_future(future) for future in futures.values()]
    await asyncio.gather(*wrapped, return_exceptions=True)
    return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
