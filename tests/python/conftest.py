"""Shared fixtures: where the build, the tools and the assets are."""
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("PULSE_BUILD_DIR", REPO / "build")).resolve()


@pytest.fixture(scope="session")
def repo_root() -> pathlib.Path:
    return REPO


@pytest.fixture(scope="session")
def build_dir() -> pathlib.Path:
    return _build_dir()


@pytest.fixture(scope="session")
def tool():
    """tool(name) -> path of a program in the build's bin/ folder (fails if it is not built)."""

    def find(name: str) -> pathlib.Path:
        path = _build_dir() / "bin" / name
        if not path.exists():
            pytest.fail(f"{path} is not built: run scripts/build")
        return path

    return find


@pytest.fixture(scope="session")
def smollm2_path() -> pathlib.Path:
    path = REPO / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/setup")
    return path


@pytest.fixture(scope="session")
def shakespeare_path() -> pathlib.Path:
    path = REPO / ".cache" / "data" / "tiny-shakespeare.txt"
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/setup")
    return path


@pytest.fixture(scope="session")
def smollm2_text(smollm2_path):
    """SmolLM2 loaded through libpulseinfer.so for its text functions (see pulse_text.py)."""
    import pulse_text

    library = pulse_text.TextLibrary(_build_dir() / "lib" / "libpulseinfer.so", smollm2_path)
    yield library
    library.close()
