use pulseinfer::{
    Admission, Engine, EngineParams, FinishReason, OffloadMode, RequestState, TokenizeFlags,
};

use super::{engine, greedy, model, tokens, PROMPT};

#[test]
fn request_stats_count_and_time_the_generation() {
    let engine = engine();
    let mut generation = engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &greedy(8)).unwrap();
    let queued = generation.stats().unwrap();
    assert_eq!(queued.state, RequestState::Queued);
    assert_eq!(queued.finish_reason, None);

    tokens(&mut generation);
    let stats = generation.stats().unwrap();
    assert_eq!(stats.state, RequestState::Finished);
    assert_eq!(stats.finish_reason, Some(FinishReason::MaxTokens));
    assert_eq!(stats.finish_reason.unwrap().to_string(), "max_tokens");
    let prompt = model().tokenize(PROMPT, TokenizeFlags::DEFAULT).unwrap();
    assert_eq!(stats.prompt_tokens as usize, prompt.len());
    assert_eq!(stats.generated_tokens, 8);
    assert!(stats.time_to_first_token > stats.queue_time);
    assert!(stats.total_time >= stats.time_to_first_token);
    assert!(!stats.time_per_output_token.is_zero());
}

#[test]
fn engine_stats_add_up_the_requests() {
    let engine = engine();
    let before = engine.stats().unwrap();
    assert_eq!((before.steps, before.generated_tokens, before.finished_requests), (0, 0, 0));
    assert!(before.kv_blocks > 0);

    let mut generation = engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &greedy(4)).unwrap();
    assert_eq!(engine.stats().unwrap().queued, 1);
    tokens(&mut generation);
    let after = engine.stats().unwrap();
    assert_eq!(after.generated_tokens, 4);
    assert_eq!(after.finished_requests, 1);
    assert_eq!(after.prefill_tokens, i64::from(generation.stats().unwrap().prompt_tokens));
    assert!(after.steps >= 4);
    assert_eq!((after.queued, after.running, after.kv_blocks_in_use), (0, 0, 0));
}

#[test]
fn offload_with_a_budget_covering_the_context_generates_the_dense_ids() {
    let dense = engine();
    let mut generation = dense.submit_text(PROMPT, TokenizeFlags::DEFAULT, &greedy(8)).unwrap();
    let expected: Vec<i32> = tokens(&mut generation).iter().map(|token| token.id).collect();
    for mode in [OffloadMode::SoloHead, OffloadMode::HeadWise] {
        let params = EngineParams::default()
            .max_context(512)
            .kv_capacity_tokens(4096)
            .offload_mode(mode)
            .offload_budget_tokens(4096)
            .offload_admission(Admission::OffloadEvery);
        let sparse = Engine::new(model(), &params).unwrap();
        let mut generation =
            sparse.submit_text(PROMPT, TokenizeFlags::DEFAULT, &greedy(8)).unwrap();
        let ids: Vec<i32> = tokens(&mut generation).iter().map(|token| token.id).collect();
        assert_eq!(ids, expected, "{mode:?}");
        let stats = sparse.stats().unwrap();
        assert!(stats.sparse_selections > 0);
        assert_eq!(stats.sparse_attended_tokens, stats.sparse_context_tokens);
    }
}
