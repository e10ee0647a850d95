"""The compiled hot modules: used only when the build matches every source, else none."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.native import missing_tools
from streams import native


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A checkout with the listed sources and a build manifest that matches them."""
    monkeypatch.delenv(native.DISABLE_ENV, raising=False)  # ./dev test also runs under =0
    for module in native.NATIVE_MODULES:
        target = native.source_path(module, tmp_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(native.source_path(module), target)
    for name in native.input_hashes():
        target = tmp_path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(native.ROOT / name, target)
    build = native.build_dir(tmp_path)
    build.mkdir(parents=True)
    manifest = {
        "abi": native.abi(),
        "modules": native.source_hashes(tmp_path),
        "inputs": native.input_hashes(tmp_path),
    }
    (build / native.MANIFEST).write_text(json.dumps(manifest))
    native.active.cache_clear()
    yield tmp_path
    native.active.cache_clear()


def test_a_build_matching_every_source_goes_in_front_of_the_package_path(root: Path) -> None:
    assert native.stale_reason(root) is None
    path = native.extend_path(["/src/services/executor"], "services.executor", root)
    assert path == [str(native.build_dir(root) / "services" / "executor"), "/src/services/executor"]


def test_one_edited_source_leaves_every_module_pure(root: Path) -> None:
    source = native.source_path("services.executor.runs", root)
    source.write_text(source.read_text() + "\n# edited\n")
    reason = native.stale_reason(root)
    assert reason is not None and "services.executor.runs" in reason
    assert native.extend_path(["/src/x"], "services.timer", root) == ["/src/x"]


@pytest.mark.parametrize("edited", ["schemas/due_event.v1.avsc", "streams/avro_source.py"])
def test_an_edited_schema_or_generator_leaves_every_module_pure(root: Path, edited: str) -> None:
    """The generated decoders compiled in the build are made from these."""
    path = root / edited
    path.write_text(path.read_text() + "\n")
    reason = native.stale_reason(root)
    assert reason is not None and edited in reason
    assert native.extend_path(["/src/x"], "services.timer", root) == ["/src/x"]
    (root / "schemas" / "new.v1.avsc").write_text("{}")
    path.write_text((native.ROOT / edited).read_text())
    assert "schemas/new.v1.avsc" in (native.stale_reason(root) or "")


def test_a_build_from_before_the_generated_decoders_is_stale(root: Path) -> None:
    manifest_path = native.build_dir(root) / native.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    del manifest["inputs"]
    manifest_path.write_text(json.dumps(manifest))
    assert "generator or schemas changed" in (native.stale_reason(root) or "")


def test_a_build_for_another_interpreter_is_not_used(root: Path) -> None:
    manifest_path = native.build_dir(root) / native.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["abi"] = ".cpython-399-x86_64-linux-gnu.so 3.99.0"
    manifest_path.write_text(json.dumps(manifest))
    assert "another interpreter" in (native.stale_reason(root) or "")
    assert not native.active(root)


def test_no_build_or_an_unreadable_manifest_is_not_used(root: Path) -> None:
    manifest_path = native.build_dir(root) / native.MANIFEST
    manifest_path.write_text("{not json")
    assert "unreadable" in (native.stale_reason(root) or "")
    manifest_path.unlink()
    assert "no build" in (native.stale_reason(root) or "")


def test_kafkron_native_0_turns_a_fresh_build_off(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(native.DISABLE_ENV, "0")
    assert native.stale_reason(root) is None
    assert native.extend_path(["/src/x"], "services.executor", root) == ["/src/x"]


def test_setup_built_the_modules_and_they_are_what_imports() -> None:
    """``./dev`` builds them wherever it has a compiler; then the services import them."""
    if missing_tools():
        pytest.skip(f"no compiler here: {missing_tools()}")
    assert native.stale_reason() is None, "setup should have built the compiled modules"
    import services.executor.handlers
    import services.executor.runs
    import services.timer.wheel

    expected = native.active()  # False only under KAFKRON_NATIVE=0
    assert native.compiled(services.executor.runs) is expected
    assert native.compiled(services.timer.wheel) is expected
    assert not native.compiled(services.executor.handlers)  # not listed
    # The generated decoders of the readers streams.generated_modules lists, too.
    from services.timer.stored_state import StoredStates
    from streams.codec import Codec

    read = StoredStates(Codec.from_directory()).record.reader.read
    assert type(read).__module__.startswith("kafkron_generated.") is expected


def test_a_stale_build_is_a_warning_and_no_build_is_not(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = native.source_path("services.timer.wheel", root)
    source.write_text(source.read_text() + "\n# edited\n")
    with caplog.at_level("INFO", logger=native.__name__):
        assert not native.active(root)
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "services.timer.wheel" in caplog.records[0].getMessage()
    native.active.cache_clear()
    caplog.clear()
    (native.build_dir(root) / native.MANIFEST).unlink()
    with caplog.at_level("INFO", logger=native.__name__):
        assert not native.active(root)
    assert [r.levelname for r in caplog.records] == ["INFO"]
