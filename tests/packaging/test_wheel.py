"""The Python wheel as a user gets it (scripts/package builds it into $PULSE_PACKAGE_DIR/wheel
with the package build's library bundled): installed into a fresh virtual environment, with no
build tree in reach, it imports and answers a chat from SmolLM2."""
import os
import subprocess
import sys

import pytest
from packaging_util import MODEL, PACKAGE_DIR

SCRIPT = """
import sys
import pulseinfer
assert pulseinfer.__file__.startswith(sys.prefix), pulseinfer.__file__
with pulseinfer.Model(sys.argv[1]) as model, pulseinfer.Engine(model) as engine:
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    print(pulseinfer.version(), engine.chat(chat, pulseinfer.SamplingParams(temperature=0,
                                                                         max_tokens=16)).text())
"""


def test_the_wheel_installs_and_generates_in_a_fresh_venv(tmp_path):
    wheels = sorted((PACKAGE_DIR / "wheel").glob("pulseinfer-*.whl"))
    if not wheels:
        pytest.fail(f"no wheel in {PACKAGE_DIR / 'wheel'}: run scripts/package")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-index", str(wheels[-1])],
                   check=True)
    # Outside the repository, with no PYTHONPATH or library path into a build tree.
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "LD_LIBRARY_PATH", "PULSE_BUILD_DIR")}
    out = subprocess.run([str(python), "-c", SCRIPT, str(MODEL)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("0.1.0 ") and "Paris" in out.stdout, out.stdout
