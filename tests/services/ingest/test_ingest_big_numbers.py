"""Integers beyond 64 bits in a payload are stored and read back exactly, never as floats.

orjson, the create lane's first decoder, reads such an integer as a float without an error;
the lane sends a body with one to json.loads instead (``decode_json``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from services.ingest.create_lane import decode_json
from tests.services.ingest.test_ingest_api import Http
from tests.services.ingest.test_ingest_nesting import module_api, post_batch, post_create

BIG = [2**64, 2**70, -(2**63) - 1, -(10**30), 10**40 + 1]
PAYLOAD = json.dumps({"ids": BIG, "edge": [2**64 - 1, -(2**63)], "text": "1" * 25})


@pytest.mark.parametrize("number", [*BIG, 2**64 - 1, -(2**63), 0])
def test_decode_json_reads_every_integer_exactly(number: int) -> None:
    body = decode_json(f'{{"payload": {{"n": {number}}}}}'.encode(), 65)
    assert body["payload"]["n"] == number and type(body["payload"]["n"]) is int


@pytest.fixture(scope="module")
def http(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    with module_api(kafka_bootstrap, tmp_path_factory.mktemp("big-numbers")) as client:
        yield client


@pytest.mark.kafka
@pytest.mark.parametrize("key", [None, "big-numbers-keyed"])
def test_create_keeps_integers_beyond_64_bits(http: Http, key: str | None) -> None:
    response = post_create(http, PAYLOAD, key)
    assert response.status_code == 201, response.text
    stored = http.get(f"/api/jobs/{response.json()['job_id']}")
    assert stored.status_code == 200, stored.text
    assert json.loads(stored.text)["payload"] == json.loads(PAYLOAD)


@pytest.mark.kafka
def test_batch_keeps_integers_beyond_64_bits(http: Http) -> None:
    response = post_batch(http, PAYLOAD, PAYLOAD)
    assert response.status_code in (200, 201, 207), response.text
    for item in response.json()["items"]:
        stored = http.get(f"/api/jobs/{item['job_id']}")
        assert json.loads(stored.text)["payload"] == json.loads(PAYLOAD), stored.text
