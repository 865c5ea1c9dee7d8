"""The Debian packages as a user gets them (scripts/package builds them into $PULSE_PACKAGE_DIR):
unpacked into a scratch root, their fields name the right packages and dependencies, a C program
builds and runs against them through pkg-config and through find_package(pulseinfer), the
packaged command generates from SmolLM2, and it runs under user-mode QEMU on a CPU model without
AVX (the packages are built for the x86-64 baseline)."""
import json
import os
import pathlib
import shutil
import subprocess

import pytest
from packaging_util import MODEL, VERSION, libdir, run

PROGRAM = r"""
#include <pulseinfer/pulseinfer.h>
#include <stdio.h>

int main(void) {
  if (pulse_abi_version() != PULSE_ABI_VERSION) return 1;
  printf("%s\n", pulse_version());
  return 0;
}
"""


def test_three_packages_with_their_dependencies(debs):
    assert sorted(debs) == ["libpulseinfer-dev", "libpulseinfer0", "pulseinfer"]
    runtime = run(["dpkg-deb", "-f", str(debs["libpulseinfer0"]), "Version", "Depends"])
    assert f"Version: {VERSION}" in runtime
    assert "libabsl" in runtime and "libstdc++6" in runtime  # found by dpkg-shlibdeps
    for dependent in ("libpulseinfer-dev", "pulseinfer"):
        depends = run(["dpkg-deb", "-f", str(debs[dependent]), "Depends"])
        assert f"libpulseinfer0 (= {VERSION})" in depends
    files = {name: run(["dpkg-deb", "-c", str(path)]) for name, path in debs.items()}
    assert "libpulseinfer.so.0" in files["libpulseinfer0"]
    assert "pulseinfer.h" not in files["libpulseinfer0"]
    for installed in ("pulseinfer.h", "pulseinfer.pc", "pulseinferConfig.cmake",
                      "libpulseinfer.so ->"):
        assert installed in files["libpulseinfer-dev"], installed
    assert "./usr/bin/pulseinfer" in files["pulseinfer"]


def test_a_c_program_builds_with_pkg_config(root, tmp_path):
    source = tmp_path / "consumer.c"
    source.write_text(PROGRAM)
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir(root) / "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "pulseinfer"], env=env).split()
    assert any(flag.startswith(f"-I{root}") for flag in flags), flags
    binary = tmp_path / "consumer"
    run(["cc", "-std=c99", "-Wall", "-Werror", str(source), *flags, "-o", str(binary)])
    out = run([str(binary)], env=dict(os.environ, LD_LIBRARY_PATH=str(libdir(root))))
    assert out.strip() == VERSION


def test_a_cmake_project_finds_the_package(root, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "consumer.c").write_text(PROGRAM)
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.25)\nproject(consumer C)\n"
        f"find_package(pulseinfer {VERSION} REQUIRED)\n"
        "add_executable(consumer consumer.c)\n"
        "target_link_libraries(consumer PRIVATE pulseinfer::pulseinfer)\n")
    build = tmp_path / "build"
    run(["cmake", "-S", str(project), "-B", str(build), "-G", "Ninja",
         f"-DCMAKE_PREFIX_PATH={root / 'usr'}"])
    run(["cmake", "--build", str(build)])
    out = run([str(build / "consumer")], env=dict(os.environ, LD_LIBRARY_PATH=str(libdir(root))))
    assert out.strip() == VERSION


def packaged_command(root: pathlib.Path) -> list:
    return [str(root / "usr" / "bin" / "pulseinfer")]


def test_the_packaged_command_generates(root):
    out = run(packaged_command(root) + ["generate", "--model", str(MODEL), "--prompt",
                                        "The capital of France is", "--max-tokens", "8",
                                        "--format", "ids", "--quiet"],
              env=dict(os.environ, LD_LIBRARY_PATH=str(libdir(root))))
    assert len(out.strip().split(",")) == 8, out


def test_the_packaged_command_runs_on_a_cpu_without_avx(root, tmp_path):
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        pytest.fail("qemu-x86_64 is not installed: run scripts/setup (qemu-user)")
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
        "intermediate_size": 160, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 300,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1,
        "eos_token_id": 2}))
    command = ["generate", "--model", str(config), "--random-weights", "--prompt-ids",
               "5,6,7,8", "--max-tokens", "4", "--ignore-eos", "--format", "ids", "--quiet"]
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir(root)))
    # The kernels' generic level natively, and the level Nehalem (SSE4.2, no AVX) is given: the
    # generic one, which must not contain an instruction past the baseline (SIGILL here).
    native = run(packaged_command(root) + command, env=dict(env, PULSEINFER_CPU_LEVEL="generic"))
    emulated = run([qemu, "-cpu", "Nehalem"] + packaged_command(root) + command, env=env)
    assert emulated == native and len(native.strip().split(",")) == 4, (native, emulated)
    # A level the CPU lacks, forced, is an error that names it.
    forced = subprocess.run([qemu, "-cpu", "Nehalem"] + packaged_command(root) + command,
                            env=dict(env, PULSEINFER_CPU_LEVEL="avx2"), capture_output=True,
                            text=True)
    assert forced.returncode != 0 and "does not run the avx2 kernels" in forced.stderr
