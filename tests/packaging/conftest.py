"""Fixtures of the package tests: the packages scripts/package built into $PULSE_PACKAGE_DIR and
a scratch root they are unpacked into."""
import pathlib

import pytest
from packaging_util import PACKAGE_DIR, run


@pytest.fixture(scope="session")
def debs() -> dict:
    found = {run(["dpkg-deb", "-f", str(path), "Package"]).strip(): path
             for path in PACKAGE_DIR.glob("*.deb")}
    if not found:
        pytest.fail(f"no .deb in {PACKAGE_DIR}: run scripts/package")
    return found


@pytest.fixture(scope="session")
def root(debs, tmp_path_factory) -> pathlib.Path:
    """The packages unpacked, as dpkg would install them under /."""
    root = tmp_path_factory.mktemp("root")
    for path in debs.values():
        run(["dpkg-deb", "-x", str(path), str(root)])
    return root
