"""The shared library exports exactly the functions pulseinfer.h declares, under its SONAME."""
from __future__ import annotations

import re
import subprocess

import pytest

DECLARATION = re.compile(r"PULSE_API\b[^;{]*?\b(pulse_\w+)\s*\(", re.S)


@pytest.fixture(scope="module")
def header_text(repo_root) -> str:
    return (repo_root / "capi" / "include" / "pulseinfer" / "pulseinfer.h").read_text()


@pytest.fixture(scope="module")
def library(build_dir):
    path = build_dir / "lib" / "libpulseinfer.so"
    if not path.exists():
        pytest.fail(f"{path} is not built: run scripts/build")
    return path


def declared_functions(header_text: str) -> set[str]:
    return set(DECLARATION.findall(header_text))


def exported_symbols(library) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], check=True,
                         capture_output=True, text=True).stdout
    # "0000000000012340 T pulse_version"; versioned names carry "@..." (none expected).
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_header_declares_the_abi(header_text):
    functions = declared_functions(header_text)
    assert len(functions) >= 20, sorted(functions)
    assert {"pulse_model_load", "pulse_engine_step", "pulse_request_submit",
            "pulse_last_error"} <= functions


def test_exports_equal_the_header(header_text, library):
    declared = declared_functions(header_text)
    exported = exported_symbols(library)
    assert exported - declared == set(), "exported but not declared"
    assert declared - exported == set(), "declared but not exported"


def test_soname_carries_the_abi_version(header_text, library):
    abi = re.search(r"#define PULSE_ABI_VERSION (\d+)", header_text).group(1)
    dynamic = subprocess.run(["readelf", "-d", str(library)], check=True, capture_output=True,
                             text=True).stdout
    soname = re.search(r"\(SONAME\)\s+Library soname: \[(.+?)\]", dynamic).group(1)
    assert soname == f"libpulseinfer.so.{abi}"
    assert library.resolve().name.startswith(f"libpulseinfer.so.{abi}.")
