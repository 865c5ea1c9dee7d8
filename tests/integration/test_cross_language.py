"""The same prompt, greedy, gives the same token ids from the CLI, the C sample (built against an
installed tree with pkg-config), Python, Rust and Go.

Run by scripts/test after the bindings' own stages, which leave the Python package in
$PULSE_BUILD_DIR/python and the Rust sample built; the C and Go samples are built here.
"""
import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("PULSE_BUILD_DIR", REPO / "build")).resolve()
MODEL = REPO / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPT = "The three most useful things to pack for a long walk are"
MAX_TOKENS = "24"


def run(command, **kwargs) -> str:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600, **kwargs)
    assert proc.returncode == 0, f"{command}\nexit {proc.returncode}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> pathlib.Path:
    prefix = tmp_path_factory.mktemp("prefix")
    run(["cmake", "--install", str(BUILD), "--prefix", str(prefix)])
    return prefix


def c_sample(installed: pathlib.Path, tmp_path: pathlib.Path) -> list:
    libdir = next(p.parent for p in installed.rglob("pulseinfer.pc")).parent
    env = dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "pulseinfer"], env=env).split()
    binary = tmp_path / "generate_c"
    run(["cc", "-std=c99", "-Wall", "-Wpedantic", "-Werror", str(REPO / "samples/c/generate.c"),
         *flags, f"-Wl,-rpath,{libdir}", "-o", str(binary)])
    return [str(binary)]


def go_sample(tmp_path: pathlib.Path) -> list:
    binary = tmp_path / "generate_go"
    env = dict(os.environ, GOPROXY="off", GOFLAGS="-mod=mod",
               CGO_LDFLAGS=f"-L{BUILD / 'lib'} -Wl,-rpath,{BUILD / 'lib'}")
    env.setdefault("GOCACHE", str(tmp_path / "gocache"))
    run(["go", "build", "-o", str(binary), "./generate"], cwd=REPO / "samples/go", env=env)
    return [str(binary)]


def rust_sample() -> list:
    crate = REPO / "samples/rust/generate"
    env = dict(os.environ, PULSEINFER_LIB_DIR=str(BUILD / "lib"))
    run(["cargo", "build", "--locked", "--release"], cwd=crate, env=env)
    return [str(crate / "target/release/generate")]


def test_every_language_generates_the_same_ids(installed, tmp_path):
    python_env = dict(os.environ, PYTHONPATH=str(BUILD / "python"))
    programs = {
        "cli": ([str(BUILD / "bin/pulseinfer"), "generate", "--format", "ids", "--quiet"], None),
        "c": (c_sample(installed, tmp_path), None),
        "python": ([shutil.which("python3"), str(REPO / "samples/python/generate.py")],
                   python_env),
        "python-ctypes": ([shutil.which("python3"),
                           str(REPO / "samples/python/ctypes_generate.py")], python_env),
        "rust": (rust_sample(), None),
        "go": (go_sample(tmp_path), None),
    }
    ids = {}
    for name, (command, env) in programs.items():
        args = ["--model", str(MODEL), "--prompt", PROMPT, "--max-tokens", MAX_TOKENS]
        if name != "cli":
            args.append("--ids")
        ids[name] = run(command + args, env=env).strip()
    assert len(ids["cli"].split(",")) == int(MAX_TOKENS), ids["cli"]
    assert all(value == ids["cli"] for value in ids.values()), ids
