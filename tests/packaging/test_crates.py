"""The Rust crates as a user gets them (scripts/package runs `cargo package` for pulseinfer-sys
and pulseinfer into $PULSE_PACKAGE_DIR/crates): a crate outside the tree that depends on
pulseinfer 0.1.0 from a registry holding the two packaged crates (and Debian's, which the build
uses offline) builds against the installed library, found by pkg-config in the unpacked Debian
packages, and answers a chat from SmolLM2."""
import hashlib
import os
import pathlib
import tarfile

import pytest
from packaging_util import MODEL, PACKAGE_DIR, VERSION, libdir, run

DEBIAN_REGISTRY = pathlib.Path("/usr/share/cargo/registry")

MAIN = r"""
use pulseinfer::{ChatMessage, Engine, EngineParams, Model, ModelParams, SamplingParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args().nth(1).expect("a model path");
    let model = Model::load(path, &ModelParams::default())?;
    let engine = Engine::new(&model, &EngineParams::default())?;
    let greedy = SamplingParams::default().temperature(0.0).max_tokens(16);
    for token in engine.submit_chat(&[ChatMessage::user("What is the capital of France?")], &greedy)? {
        print!("{}", token?.text);
    }
    println!();
    Ok(())
}
"""


def registry(tmp_path: pathlib.Path) -> pathlib.Path:
    """A directory registry: Debian's crates and the two packaged ones."""
    crates = sorted((PACKAGE_DIR / "crates").glob("*.crate"))
    if len(crates) != 2:
        pytest.fail(f"the two crates are not in {PACKAGE_DIR / 'crates'}: run scripts/package")
    directory = tmp_path / "registry"
    directory.mkdir()
    for crate in DEBIAN_REGISTRY.iterdir():
        (directory / crate.name).symlink_to(crate)
    for crate in crates:
        with tarfile.open(crate) as archive:
            archive.extractall(directory)
        checksum = hashlib.sha256(crate.read_bytes()).hexdigest()
        (directory / crate.name.removesuffix(".crate") / ".cargo-checksum.json").write_text(
            f'{{"files": {{}}, "package": "{checksum}"}}')
    return directory


def test_a_crate_builds_against_the_installed_library(root, tmp_path):
    consumer = tmp_path / "consumer"
    (consumer / "src").mkdir(parents=True)
    (consumer / "src" / "main.rs").write_text(MAIN)
    (consumer / "Cargo.toml").write_text(
        '[package]\nname = "consumer"\nversion = "0.1.0"\nedition = "2021"\npublish = false\n\n'
        f'[dependencies]\npulseinfer = "{VERSION}"\n')
    (consumer / ".cargo").mkdir()
    (consumer / ".cargo" / "config.toml").write_text(
        '[source.crates-io]\nreplace-with = "local"\n\n'
        f'[source.local]\ndirectory = "{registry(tmp_path)}"\n\n[net]\noffline = true\n')
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("PULSEINFER_")}  # only pkg-config finds the library
    env["PKG_CONFIG_PATH"] = str(libdir(root) / "pkgconfig")
    env["CARGO_TARGET_DIR"] = str(tmp_path / "target")
    run(["cargo", "build", "--release"], cwd=consumer, env=env)
    out = run([str(tmp_path / "target" / "release" / "consumer"), str(MODEL)],
              env=dict(env, LD_LIBRARY_PATH=str(libdir(root))))
    assert "Paris" in out, out
