"""Generated decoders as modules of the compiled build (streams/generated_modules.py)."""

from __future__ import annotations

from typing import Any

import pytest

from streams import generated_modules, native
from streams.avro_binary import MAX_READ_LONG_BYTES
from streams.avro_reader import GeneratedReader, Memo, generate_reader
from streams.codec import Codec, RecordKind
from streams.probe_records import probe_records

CODEC = Codec.from_directory()
KIND = RecordKind.TIMER_STATE


def _generate() -> GeneratedReader:
    """A memoized decoder of the timer's states (longs through the long memo too)."""
    schema = CODEC.writer_schema(KIND)
    names = [str(f["name"]) for f in schema["fields"]]
    return generate_reader(schema, start=10, memos=[Memo(names[3], names[-1])], memo_longs=True)


def _reader_and_text() -> tuple[GeneratedReader, str]:
    """The decoder and its module text (:func:`generated_modules.module_text`)."""
    with generated_modules.recording() as texts:
        reader = _generate()
    (text,) = texts
    return reader, text


def _env() -> dict[str, Any]:
    """A fresh env of the decoder's objects, as generate_reader hands it to the build's."""
    captured: dict[str, Any] = {}

    def capture(source: str, env: dict[str, Any]) -> None:
        captured.update(env)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("streams.avro_reader.compiled_functions", capture)
        _generate()
    captured.pop("__builtins__", None)
    return captured


def _probes() -> list[dict[str, Any]]:
    schema = CODEC.writer_schema(KIND)
    return list(probe_records(schema, CODEC.bounds, max_varint_bytes=MAX_READ_LONG_BYTES))


def _bind(text: str, env: dict[str, Any]) -> dict[str, Any]:
    """What ``bind`` of the module text returns, the module run as Python."""
    module: dict[str, Any] = {}
    exec(compile(text, "<generated module>", "exec"), module)
    functions: dict[str, Any] = module["bind"](env)
    return functions


def test_the_module_text_reads_as_the_exec_d_source() -> None:
    reader, text = _reader_and_text()
    functions = _bind(text, _env())
    probes = [CODEC.encode(KIND, r) for r in _probes()]
    assert len(probes) > 5
    for value in [*probes, *probes]:  # parsed, then from the memo
        assert functions["read"](value) == reader.read(value)
    with pytest.raises(IndexError):
        functions["read"](probes[0][:12])


def test_two_binds_share_no_memo() -> None:
    """Two readers of one source (two codecs in a process) keep their own runs."""
    _, text = _reader_and_text()
    envs = [_env(), _env()]
    first, second = (_bind(text, env)["read"] for env in envs)
    value = CODEC.encode(KIND, _probes()[0])
    first(value)
    assert envs[0]["_entries0"] and not envs[1]["_entries0"]
    assert second(value) == first(value)


def test_locals_are_typed_only_where_the_generator_gives_one_type() -> None:
    """``w`` holds a slice of bytes, then a width: it must stay ``Any`` for mypyc."""
    _, text = _reader_and_text()
    assert "        w: Any" in text and "        pos: int" in text
    assert "def read(data: bytes) -> Any:" in text
    assert "_entries0: dict[bytes, Any] = env['_entries0']" in text


def test_without_a_module_in_the_build_the_source_is_exec_d(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(native, "active", lambda root=native.ROOT: True)
    monkeypatch.setattr(native, "manifest", lambda root=native.ROOT: {"generated": ["g_other"]})
    with generated_modules.recording():
        source = _generate().source
    assert generated_modules.compiled_functions(source, _env()) is None
    read = _generate().read
    assert not type(read).__module__.startswith("kafkron_") and read.__code__ is not None
