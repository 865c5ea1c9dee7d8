"""pulseinfer.h is clean C99 and C++, and a C program links the library through it alone:
from the build tree and from an install (pkg-config and find_package)."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

PROGRAM = r"""
#include <pulseinfer/pulseinfer.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  pulse_engine_params params;
  if (pulse_engine_params_init(&params, sizeof(params)) != PULSE_OK) return 1;
  if (pulse_engine_run(NULL) != PULSE_INVALID_ARGUMENT) return 2;
  if (strstr(pulse_last_error(), "engine is NULL") == NULL) return 3;
  if (pulse_abi_version() != PULSE_ABI_VERSION) return 4;
  printf("%s\n", pulse_version());
  return 0;
}
"""


@pytest.fixture(scope="module")
def include_dir(repo_root):
    return repo_root / "capi" / "include"


@pytest.fixture(scope="module")
def library_dir(build_dir):
    path = build_dir / "lib"
    if not (path / "libpulseinfer.so").exists():
        pytest.fail(f"{path}/libpulseinfer.so is not built: run scripts/build")
    return path


def compile_only(compiler: list[str], include_dir, tmp_path, suffix: str):
    source = tmp_path / f"header{suffix}"
    source.write_text("#include <pulseinfer/pulseinfer.h>\nint main(void) { return 0; }\n")
    subprocess.run(compiler + ["-Wall", "-Wextra", "-Werror", "-pedantic-errors",
                               f"-I{include_dir}", "-c", str(source), "-o",
                               str(tmp_path / "header.o")], check=True)


@pytest.mark.parametrize("standard", ["c99", "c11"])
def test_header_is_strict_c(standard, include_dir, tmp_path):
    compile_only(["gcc", f"-std={standard}", "-Wstrict-prototypes"], include_dir, tmp_path, ".c")


@pytest.mark.parametrize("standard", ["c++11", "c++20"])
def test_header_is_strict_cxx(standard, include_dir, tmp_path):
    compile_only(["g++", f"-std={standard}"], include_dir, tmp_path, ".cc")


def build_and_run(tmp_path, flags: list[str], library_dir, expected_version: str | None = None):
    source = tmp_path / "consumer.c"
    source.write_text(PROGRAM)
    binary = tmp_path / "consumer"
    subprocess.run(["gcc", "-std=c99", str(source), "-o", str(binary)] + flags, check=True)
    env = dict(os.environ, LD_LIBRARY_PATH=str(library_dir))
    run = subprocess.run([str(binary)], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    if expected_version is not None:
        assert run.stdout.strip() == expected_version


def test_c_program_links_the_build_tree(include_dir, library_dir, tmp_path):
    build_and_run(tmp_path, [f"-I{include_dir}", f"-L{library_dir}", "-lpulseinfer"],
                  library_dir)


def test_install_gives_pkg_config_and_cmake_package(build_dir, tmp_path):
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(build_dir), "--prefix", str(prefix)], check=True,
                   capture_output=True)
    libraries = list(prefix.glob("lib*/**/libpulseinfer.so.0"))
    assert len(libraries) == 1, libraries
    library_dir = libraries[0].parent
    assert (prefix / "include" / "pulseinfer" / "pulseinfer.h").exists()
    cli = subprocess.run([str(prefix / "bin" / "pulseinfer"), "version"], capture_output=True,
                         text=True)
    assert cli.returncode == 0, cli.stderr

    pkg_config = shutil.which("pkg-config")
    if pkg_config is not None:
        env = dict(os.environ, PKG_CONFIG_PATH=str(library_dir / "pkgconfig"))
        flags = subprocess.run([pkg_config, "--cflags", "--libs", "pulseinfer"], check=True,
                               capture_output=True, text=True, env=env).stdout.split()
        version = subprocess.run([pkg_config, "--modversion", "pulseinfer"], check=True,
                                 capture_output=True, text=True, env=env).stdout.strip()
        build_and_run(tmp_path, flags, library_dir, expected_version=version)

    project = tmp_path / "cmake_consumer"
    project.mkdir()
    (project / "consumer.c").write_text(PROGRAM)
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(consumer C)\n"
        "find_package(pulseinfer 0 REQUIRED)\nadd_executable(consumer consumer.c)\n"
        "target_link_libraries(consumer PRIVATE pulseinfer::pulseinfer)\n")
    consumer_build = tmp_path / "cmake_consumer_build"
    subprocess.run(["cmake", "-S", str(project), "-B", str(consumer_build),
                    f"-DCMAKE_PREFIX_PATH={prefix}"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(consumer_build)], check=True, capture_output=True)
    run = subprocess.run([str(consumer_build / "consumer")], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
