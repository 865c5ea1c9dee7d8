//! The sample's command line, against the `pulseinfer` command of the same build (BUILD_DIR,
//! by default this source tree's build/): the same prompt gives the same ids and text.

use std::path::PathBuf;
use std::process::{Command, Output};

const PROMPT: &str = "The capital of France is";

fn model() -> String {
    std::env::var("PULSEINFER_MODEL").expect("PULSEINFER_MODEL names the model")
}

fn generate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_generate")).args(args).output().expect("generate runs")
}

fn pulseinfer(args: &[&str]) -> Output {
    let build_dir = std::env::var_os("BUILD_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../build"),
        PathBuf::from,
    );
    let output = Command::new(build_dir.join("bin/pulseinfer"))
        .args(args)
        .output()
        .expect("the pulseinfer command runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    output
}

fn stdout(output: &Output) -> &str {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    std::str::from_utf8(&output.stdout).expect("UTF-8 output")
}

#[test]
fn ids_and_text_are_those_of_the_pulseinfer_command() {
    let model = model();
    let common = ["--model", model.as_str(), "--prompt", PROMPT, "--max-tokens", "8"];
    let ids = generate(&[&common[..], &["--ids"]].concat());
    let expected_ids =
        pulseinfer(&[&["generate"], &common[..], &["--format", "ids", "--quiet"]].concat());
    assert_eq!(stdout(&ids), stdout(&expected_ids));
    assert_eq!(stdout(&ids).trim_end().split(',').count(), 8);

    let text = generate(&common);
    let expected_text = pulseinfer(&[&["generate"], &common[..], &["--quiet"]].concat());
    assert_eq!(stdout(&text), stdout(&expected_text));
}

#[test]
fn a_usage_error_exits_with_2() {
    let output = generate(&["--prompt", PROMPT]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--model is required"));
}

#[test]
fn a_failure_exits_with_1_and_the_library_message() {
    let output = generate(&["--model", "/nonexistent/model.gguf", "--prompt", PROMPT]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("not found") && stderr.contains("/nonexistent/model.gguf"), "{stderr}");
}
