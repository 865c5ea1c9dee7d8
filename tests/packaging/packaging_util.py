"""What the package tests share: where the packages are, the model, the version, and running a
command."""
import os
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE_DIR = pathlib.Path(os.environ.get("PULSE_PACKAGE_DIR", REPO / "build-package"))
MODEL = REPO / ".cache" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
VERSION = "0.1.0"


def run(command, **kwargs) -> str:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900, **kwargs)
    assert proc.returncode == 0, f"{command}\nexit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def libdir(root: pathlib.Path) -> pathlib.Path:
    return next(root.rglob("libpulseinfer.so.0")).parent
