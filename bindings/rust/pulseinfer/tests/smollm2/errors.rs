use pulseinfer::{
    DetokenizeFlags, Engine, EngineParams, Error, Model, ModelParams, SamplingParams, TokenizeFlags,
};

use super::{engine, greedy, model, PROMPT};

/// The error's message, when it is the variant `expected` names.
fn message(result: Result<impl std::fmt::Debug, Error>, expected: fn(&Error) -> bool) -> String {
    let error = result.expect_err("an error");
    assert!(expected(&error), "{error:?}");
    error.message().to_owned()
}

#[test]
fn a_missing_file_is_not_found_with_the_library_message() {
    let path = "/nonexistent/model.gguf";
    let error = Model::load(path, &ModelParams::default()).unwrap_err();
    assert!(matches!(error, Error::NotFound(_)), "{error:?}");
    assert!(error.message().contains(path), "{error}");
    assert_eq!(error.to_string(), format!("not found: {}", error.message()));
}

#[test]
fn a_file_that_is_no_model_is_invalid() {
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let error = message(Model::load(manifest, &ModelParams::default()), |error| {
        matches!(error, Error::InvalidModel(_))
    });
    assert!(!error.is_empty());
}

#[test]
fn an_unknown_backend_is_refused() {
    let params = ModelParams::default().backend("abacus");
    let error = Model::load("/nonexistent/model.gguf", &params).unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
    assert!(error.message().contains("abacus"), "{error}");
}

#[test]
fn bad_engine_params_are_invalid_arguments() {
    let error = message(Engine::new(model(), &EngineParams::default().max_batch(0)), |error| {
        matches!(error, Error::InvalidArgument(_))
    });
    assert!(error.contains("max_batch"), "{error}");
}

#[test]
fn bad_sampling_params_are_refused_at_submit() {
    let engine = engine();
    let submit = |sampling: &SamplingParams| {
        engine
            .submit_text(PROMPT, TokenizeFlags::DEFAULT, sampling)
            .map(|generation| generation.id())
    };
    let invalid = |error: &Error| matches!(error, Error::InvalidArgument(_));
    let error = message(submit(&greedy(8).temperature(-1.0)), invalid);
    assert!(error.contains("temperature"), "{error}");
    let error = message(submit(&greedy(0)), invalid);
    assert!(error.contains("max_tokens"), "{error}");
    let error = message(submit(&greedy(8).top_p(0.0)), invalid);
    assert!(error.contains("top_p"), "{error}");
    assert!(message(submit(&greedy(8).stop_strings([""])), invalid).contains("stop"));
    assert_eq!(engine.stats().unwrap().queued, 0);
}

#[test]
fn bad_prompts_are_refused_at_submit() {
    let engine = engine();
    let invalid = |error: &Error| matches!(error, Error::InvalidArgument(_));
    message(engine.submit(&[], &greedy(4)).map(|generation| generation.id()), invalid);
    let error =
        message(engine.submit(&[1, 49152], &greedy(4)).map(|generation| generation.id()), invalid);
    assert!(error.contains("49152"), "{error}");
}

#[test]
fn a_nul_byte_is_refused_by_the_binding() {
    let engine = engine();
    let sampling = greedy(4).stop_strings(["a\0b"]);
    let error = message(
        engine
            .submit_text(PROMPT, TokenizeFlags::DEFAULT, &sampling)
            .map(|generation| generation.id()),
        |error| matches!(error, Error::InvalidArgument(_)),
    );
    assert!(error.contains("NUL"), "{error}");
}

#[test]
fn a_token_outside_the_vocabulary_is_refused_by_detokenize() {
    let invalid = |error: &Error| matches!(error, Error::InvalidArgument(_));
    let error = message(model().detokenize(&[-5], DetokenizeFlags::empty()), invalid);
    assert!(error.contains("-5"), "{error}");
}
