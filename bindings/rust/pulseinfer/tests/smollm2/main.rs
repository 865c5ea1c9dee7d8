//! The safe API over the real SmolLM2-135M-Instruct (PULSEINFER_MODEL; `.cargo/config.toml`
//! points it at the in-tree copy), loaded once for every test of this binary.

mod cancellation;
mod errors;
mod generation;
mod model;
mod stats;
mod text;
mod threads;

use std::sync::OnceLock;

use pulseinfer::{Engine, EngineParams, Generation, Model, ModelParams, SamplingParams, Token};

pub const PROMPT: &str = "Once upon a time";

pub fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| {
        let path = std::env::var("PULSEINFER_MODEL").expect("PULSEINFER_MODEL names the model");
        Model::load(&path, &ModelParams::default()).expect("the test model loads")
    })
}

/// An engine with a small KV cache: quick to create, enough for these short generations.
pub fn engine() -> Engine {
    let params = EngineParams::default().max_context(512).kv_capacity_tokens(4096);
    Engine::new(model(), &params).expect("the engine is created")
}

pub fn greedy(max_tokens: i32) -> SamplingParams {
    SamplingParams::default().temperature(0.0).max_tokens(max_tokens)
}

/// Every token of a generation, failing the test on an error.
pub fn tokens(generation: &mut Generation<'_>) -> Vec<Token> {
    generation.map(|token| token.expect("a generated token")).collect()
}

pub fn ids(tokens: &[Token]) -> Vec<i32> {
    tokens.iter().map(|token| token.id).collect()
}

pub fn text(tokens: &[Token]) -> String {
    tokens.iter().map(|token| token.text.as_str()).collect()
}
