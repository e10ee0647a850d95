"""``python -m infra.native build`` when mypyc refuses the generated decoders.

mypyc is simulated at the seam the build calls it (``infra.native._compile``, given every
source to compile at once): a real build takes ~40 s. The build runs in a checkout of its own
(links to this one's sources, its own ``.state/``), so the shared build is never touched.
The fake compiler "compiles" a generated decoder by copying its module into the build as
Python, which imports as the extension would: that is how the test tells a decoder taken
from the build from one ``exec`` d.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra import native as native_build
from infra.native import NativeBuildError
from services.timer.stored_state import StoredStates
from streams import generated_modules, native
from streams.codec import Codec

LINKED = ("streams", "services", "schemas", "pyproject.toml")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A checkout whose build is its own; the process's imports restored afterwards."""
    for name in LINKED:
        (tmp_path / name).symlink_to(native.ROOT / name)
    monkeypatch.delenv(native.DISABLE_ENV, raising=False)  # ./dev test also runs under =0
    modules, path, active = set(sys.modules), list(sys.path), native.active
    active.cache_clear()
    yield tmp_path
    for name in set(sys.modules) - modules:
        if name.startswith(generated_modules.PACKAGE):
            del sys.modules[name]
    sys.path[:] = path
    active.cache_clear()


class FakeMypyc:
    """Stands in for ``_compile``: refuses any call given a generated module, or none."""

    def __init__(self, refuse_generated: bool) -> None:
        self.refuse_generated = refuse_generated
        self.calls: list[list[str]] = []

    def __call__(self, root: Path, target: Path, scratch: Path, sources: list[str]) -> None:
        self.calls.append(list(sources))
        generated = [s for s in sources if f"/{generated_modules.PACKAGE}/" in s]
        if generated and self.refuse_generated:
            raise NativeBuildError(f"mypyc build failed: {generated[0]}:3: error: refused")
        for source in generated:
            package = target / generated_modules.PACKAGE
            package.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, package / Path(source).name)


def build_with(root: Path, mypyc: FakeMypyc, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(native_build, "_compile", mypyc)
    target = native_build.build(root)
    # This process now reads the checkout's build, as a service started in it would.
    build_dir, manifest = native.build_dir, native.manifest
    monkeypatch.setattr(native, "build_dir", lambda r=root: build_dir(root))
    monkeypatch.setattr(native, "manifest", lambda r=root: manifest(root))
    monkeypatch.setattr(native, "active", lambda r=root: native.stale_reason(root) is None)
    return target


def stored_states_read() -> Any:
    """The timer's state decoder as the readers build it now (from the build or exec'd)."""
    return StoredStates(Codec.from_directory()).record.reader.read


def test_a_refused_decoder_runs_exec_d_and_the_rest_is_built(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mypyc = FakeMypyc(refuse_generated=True)
    target = build_with(root, mypyc, monkeypatch)

    hand_written = [str(native.source_path(m, root)) for m in native.NATIVE_MODULES]
    first, second = mypyc.calls
    assert first[: len(hand_written)] == hand_written and len(first) > len(hand_written)
    assert second == hand_written  # redone with the hand-written modules only
    assert "error: refused" in capsys.readouterr().err
    manifest = native.manifest(root)
    assert manifest["generated"] == [] and len(manifest["generated_refused"]) == len(first) - len(
        second
    )
    assert manifest["modules"] == native.source_hashes(root)
    assert not (target / generated_modules.PACKAGE).exists()
    # The build is used (the hand-written modules compiled), the decoders exec'd, and the
    # status says both.
    assert native.stale_reason(root) is None
    status = native_build.status_line(root)
    assert "fresh" in status and "generated decoders exec'd (mypyc refused them" in status
    read = stored_states_read()
    assert not str(getattr(read, "__module__", "")).startswith(generated_modules.PACKAGE)
    assert read.__code__.co_filename.startswith("<reader of")  # exec'd


def test_an_accepted_decoder_is_taken_from_the_build(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: the same build with mypyc accepting them uses the built decoders."""
    mypyc = FakeMypyc(refuse_generated=False)
    target = build_with(root, mypyc, monkeypatch)
    assert len(mypyc.calls) == 1
    built = native.manifest(root)["generated"]
    assert built and native.manifest(root)["generated_refused"] == []
    assert sorted(p.stem for p in (target / generated_modules.PACKAGE).glob("g_*.py")) == built
    assert f"{len(built)} generated decoders compiled" in native_build.status_line(root)
    read = stored_states_read()
    assert str(getattr(read, "__module__", "")).startswith(f"{generated_modules.PACKAGE}.g_")


def test_a_refusal_of_the_hand_written_modules_fails_the_build(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without generated decoders to drop, a refusal is the build's: nothing is listed."""
    monkeypatch.setattr(native_build, "write_generated", lambda root, directory: {})

    def refuse(root: Path, target: Path, scratch: Path, sources: list[str]) -> None:
        raise NativeBuildError("mypyc build failed: refused")

    monkeypatch.setattr(native_build, "_compile", refuse)
    with pytest.raises(NativeBuildError, match="refused"):
        native_build.build(root)
    assert "no build" in (native.stale_reason(root) or "")


def test_status_computes_the_stale_reason_once(
    root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``status`` prints its line and sets its exit code from one look at the build (it hashes
    every compiled source and the generator's inputs), fresh or stale."""
    build_with(root, FakeMypyc(refuse_generated=False), monkeypatch)
    stale_reason, reasons = native.stale_reason, list[str | None]()

    def counted(*_: Path) -> str | None:  # main asks about native.ROOT: this checkout
        reasons.append(stale_reason(root))
        return reasons[-1]

    monkeypatch.setattr(native, "stale_reason", counted)
    assert native_build.main(["status"]) == 0
    assert reasons == [None]
    assert "fresh" in capsys.readouterr().out

    monkeypatch.setattr(native, "abi", lambda: "another interpreter's")  # now stale
    reasons.clear()
    assert native_build.main(["status"]) == 1
    assert len(reasons) == 1 and reasons[0] is not None
    assert capsys.readouterr().out.strip() == f"compiled modules: {reasons[0]}"
