"""The C ABI against the one recorded for its version (scripts/abi-check, libabigail): main is
compatible, and the check tells compatible changes (a struct grown at its end, a new function, a
new enumerator) from incompatible ones, each made here to a copy of the real header."""
from __future__ import annotations

import re
import shutil
import subprocess

import pytest


@pytest.fixture(scope="module")
def abi_check(repo_root):
    for tool in ("abidw", "abidiff", "cc"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: run scripts/setup (abigail-tools)")
    return repo_root / "scripts" / "abi-check"


@pytest.fixture(scope="module")
def header(repo_root) -> str:
    return (repo_root / "capi" / "include" / "pulseinfer" / "pulseinfer.h").read_text()


def run(abi_check, *args):
    return subprocess.run([str(abi_check), *map(str, args)], capture_output=True, text=True)


def test_main_is_compatible_with_its_recorded_abi(abi_check):
    result = run(abi_check)
    assert result.returncode == 0, result.stderr
    assert "compatible with ABI version" in result.stdout


def edit(header: str, old: str, new: str) -> str:
    assert header.count(old) >= 1, old
    return header.replace(old, new, 1)


LAST_PARAM = "  int32_t offload_prefix_cache;\n} pulse_engine_params;"
FIRST_PARAM = "  int32_t max_batch;"
STATUS_STRING = "PULSE_API const char* pulse_status_string(pulse_status status);"
LAST_ERROR = "PULSE_API const char* pulse_last_error(void);"
SOLOHEAD = "PULSE_OFFLOAD_SOLOHEAD = 2"

CHANGES = {
    # compatible: what struct_size versioning and additions allow
    "a member appended to a struct": (True, LAST_PARAM, LAST_PARAM.replace(
        "} pulse_engine_params;", "  int32_t appended;\n} pulse_engine_params;")),
    "a new function": (True, LAST_ERROR,
                       LAST_ERROR + "\nPULSE_API int32_t pulse_new_function(int32_t value);"),
    "a new enumerator": (True, SOLOHEAD, SOLOHEAD + ",\n  PULSE_OFFLOAD_NEW = 3"),
    # incompatible
    "a member's type": (False, FIRST_PARAM, "  int64_t max_batch;"),
    "a member inserted before others": (False, FIRST_PARAM,
                                        "  int32_t inserted;\n" + FIRST_PARAM),
    "a removed function": (False, LAST_ERROR, ""),
    "a parameter's type": (False, STATUS_STRING,
                           STATUS_STRING.replace("pulse_status status", "int64_t status")),
    "an enumerator's value": (False, SOLOHEAD, "PULSE_OFFLOAD_SOLOHEAD = 3"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_the_check_tells_compatible_changes_from_breaking_ones(abi_check, header, repo_root,
                                                              tmp_path, change):
    compatible, old, new = CHANGES[change]
    changed = tmp_path / "pulseinfer.h"
    changed.write_text(edit(header, old, new))
    version = re.search(r"#define\s+PULSE_ABI_VERSION\s+(\d+)", header).group(1)
    result = run(abi_check, "--header", changed, "--baseline",
                 repo_root / "abi" / f"pulseinfer-abi-{version}.xml")
    if compatible:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == 1, result.stdout
        assert "not compatible" in result.stderr


def test_a_new_abi_version_needs_its_own_record(abi_check, header, tmp_path):
    bumped = tmp_path / "pulseinfer.h"
    bumped.write_text(re.sub(r"(#define\s+PULSE_ABI_VERSION\s+)(\d+)",
                             lambda m: m.group(1) + str(int(m.group(2)) + 1), header))
    result = run(abi_check, "--header", bumped)
    assert result.returncode == 1
    assert "--record" in result.stderr
