"""The samples and the README's example, run as a user runs them."""
import re
import subprocess
import sys

import pytest

PROMPT = "Once upon a time"


def run(*command, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, **kwargs)


@pytest.fixture(scope="session")
def cli_output(build_dir, smollm2_path):
    """What `pulseinfer generate` prints, per format."""

    def generate(output_format: str) -> str:
        result = run(build_dir / "bin" / "pulseinfer", "generate", "--model", smollm2_path,
                     "--prompt", PROMPT, "--max-tokens", "8", "--format", output_format,
                     "--quiet")
        assert result.returncode == 0, result.stderr
        return result.stdout

    return {output_format: generate(output_format) for output_format in ("ids", "text")}


@pytest.fixture(scope="session")
def samples(repo_root):
    return repo_root / "samples" / "python"


@pytest.mark.parametrize("sample", ["generate.py", "ctypes_generate.py"])
@pytest.mark.parametrize("output_format", ["ids", "text"])
def test_sample_prints_what_the_cli_prints(sample, output_format, samples, smollm2_path,
                                           cli_output):
    flags = ["--ids"] if output_format == "ids" else []
    result = run(sys.executable, samples / sample, "--model", smollm2_path, "--prompt", PROMPT,
                 "--max-tokens", "8", *flags)
    assert result.returncode == 0, result.stderr
    assert result.stdout == cli_output[output_format]


@pytest.mark.parametrize("sample", ["generate.py", "ctypes_generate.py"])
def test_sample_reports_errors(sample, samples, tmp_path):
    result = run(sys.executable, samples / sample, "--model", tmp_path / "missing.gguf",
                 "--prompt", PROMPT)
    assert result.returncode == 1
    assert f"no model at '{tmp_path / 'missing.gguf'}'" in result.stderr


def test_readme_example_runs(repo_root):
    readme = (repo_root / "bindings" / "python" / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.DOTALL).group(1)
    result = run(sys.executable, "-c", example, cwd=repo_root)
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout
