//! A tiny Llama with seeded random weights and no tokenizer: token prompts work, text does not.

use pulseinfer::{
    Admission, ChatMessage, CopyExecutor, DetokenizeFlags, Engine, EngineParams, EngineStats,
    Error, Eviction, FinishReason, HostCodec, Model, ModelParams, OffloadMode, SamplingParams,
    SummaryPrecision, TokenizeFlags,
};

/// A two-layer Llama with random weights and no tokenizer, shared with the C, Python and Go tests.
const CONFIG_PATH: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/../../../tests/data/tiny-llama.json");

fn load(seed: u64) -> Model {
    let params = ModelParams::default().random_weights(seed).threads(1).backend("cpu");
    Model::load(CONFIG_PATH, &params).expect("the random model loads")
}

fn generate(model: &Model, sampling: &SamplingParams) -> Vec<i32> {
    let engine = Engine::new(model, &EngineParams::default()).unwrap();
    let generation = engine.submit(&[1, 17, 42, 99], sampling).unwrap();
    generation
        .map(|token| {
            let token = token.unwrap();
            assert_eq!(token.text, "", "a model without a tokenizer has no text");
            token.id
        })
        .collect()
}

#[test]
fn random_weights_load_at_the_config_shapes() {
    let info = load(7).info().unwrap();
    assert_eq!(info.format, "random");
    assert_eq!(info.backend, "cpu");
    assert_eq!((info.num_layers, info.hidden_size, info.vocab_size), (2, 64, 300));
    assert_eq!((info.tokenizer, info.chat_template), (None, None));
}

#[test]
fn model_params_reach_the_library() {
    let f32 = ModelParams::default().random_weights(7).weight_type("f32").backend("cpu");
    assert_eq!(Model::load(CONFIG_PATH, &f32).unwrap().info().unwrap().weight_type, "f32");
    let tiny = ModelParams::default().random_weights(7).memory_limit_bytes(1024);
    let error = Model::load(CONFIG_PATH, &tiny).unwrap_err();
    assert!(matches!(error, Error::OutOfMemory(_)), "{error:?}");
}

#[test]
fn engine_params_reach_the_library() {
    let params = EngineParams::default()
        .max_batch(2)
        .prefill_chunk(2)
        .max_step_tokens(4)
        .block_tokens(16)
        .max_context(64)
        .kv_capacity_tokens(256);
    let engine = Engine::new(&load(7), &params).unwrap();
    assert_eq!(engine.stats().unwrap().kv_blocks, 256 / 16);
    let sampling = SamplingParams::default().max_tokens(100).ignore_eos(true);
    let mut generation = engine.submit(&[1, 17, 42, 99, 5], &sampling).unwrap();
    // A 5-token prompt in chunks of 2, then generated tokens up to the 64-token context.
    assert_eq!(generation.by_ref().count(), 64 - 5);
    assert_eq!(generation.stats().unwrap().finish_reason, Some(FinishReason::Context));
    let stats = engine.stats().unwrap();
    assert_eq!(stats.prefill_tokens, 5);
    assert_eq!(stats.steps, 3 + 64 - 5 - 1);
}

#[test]
fn the_same_seed_gives_the_same_tokens() {
    let greedy = SamplingParams::default().temperature(0.0).max_tokens(8).ignore_eos(true);
    let first = generate(&load(7), &greedy);
    assert_eq!(first.len(), 8);
    assert!(first.iter().all(|&id| (0..300).contains(&id)));
    assert_eq!(generate(&load(7), &greedy), first);
}

#[test]
fn text_needs_a_tokenizer() {
    let model = load(7);
    let unsupported = |error: Error| matches!(error, Error::Unsupported(_));
    assert!(unsupported(model.tokenize("hi", TokenizeFlags::DEFAULT).unwrap_err()));
    assert!(unsupported(model.detokenize(&[5], DetokenizeFlags::empty()).unwrap_err()));
    let chat = model.apply_chat_template(&[ChatMessage::user("hi")], true).unwrap_err();
    assert!(matches!(chat, Error::NotFound(_)), "{chat:?}");

    let engine = Engine::new(&model, &EngineParams::default()).unwrap();
    let sampling = SamplingParams::default().max_tokens(4);
    let text = engine.submit_text("hi", TokenizeFlags::DEFAULT, &sampling).unwrap_err();
    assert!(unsupported(text));
    let stop = engine.submit(&[1, 2, 3], &sampling.stop_strings(["."])).unwrap_err();
    assert!(matches!(stop, Error::FailedPrecondition(_)), "{stop:?}");
    assert!(!stop.message().is_empty());
}

/// The offload settings of tests/unit/capi/abi_generation_test.cc: 8-token blocks, a budget
/// covering the context, host and slot tiers of 1024 and 256 tokens, and recall (the blocks the
/// request stops keeping resident do not fill the free slots).
fn offloaded() -> EngineParams {
    EngineParams::default()
        .block_tokens(8)
        .offload_mode(OffloadMode::SoloHead)
        .offload_budget_tokens(1 << 20)
        .offload_sink_tokens(8)
        .offload_window_tokens(16)
        .offload_host_tokens(1024)
        .offload_slot_tokens(256)
        .offload_admission(Admission::OffloadEvery)
        .offload_fill_free_slots(false)
}

/// 150 ids of the tiny vocabulary.
fn prompt_150() -> Vec<i32> {
    (0..150).map(|i| 3 + (i * 37) % 297).collect()
}

/// 12 greedy ids after a 150-token prompt, and the engine's stats after them.
fn generate_150(model: &Model, params: &EngineParams) -> (Vec<i32>, EngineStats) {
    generate_each(model, params, &[prompt_150()])
}

/// 12 greedy ids after each of `prompts`, one after another in one engine (the last one's), and
/// the engine's stats after them.
fn generate_each(
    model: &Model,
    params: &EngineParams,
    prompts: &[Vec<i32>],
) -> (Vec<i32>, EngineStats) {
    let engine = Engine::new(model, params).unwrap();
    let greedy = SamplingParams::default().temperature(0.0).max_tokens(12).ignore_eos(true);
    let mut ids = Vec::new();
    for prompt in prompts {
        ids = engine.submit(prompt, &greedy).unwrap().map(|token| token.unwrap().id).collect();
    }
    (ids, engine.stats().unwrap())
}

#[test]
fn offloaded_kv_smaller_than_the_request_generates_the_dense_ids() {
    let model = load(7);
    let (dense, _) = generate_150(&model, &EngineParams::default().block_tokens(8));
    assert_eq!(dense.len(), 12);
    let executors =
        [CopyExecutor::Auto, CopyExecutor::Gather, CopyExecutor::BatchDma, CopyExecutor::PerChunk];
    for executor in executors {
        for eviction in [Eviction::Lru, Eviction::Score] {
            // A KV cache of 160 tokens: the prompt fits, the 161 tokens of KV the request
            // reaches do not.
            let params = offloaded()
                .kv_capacity_tokens(160)
                .offload_executor(executor)
                .offload_eviction(eviction);
            let (ids, stats) = generate_150(&model, &params);
            assert_eq!(ids, dense, "{executor:?}, {eviction:?}");
            assert_eq!((stats.host_blocks, stats.slot_blocks), (1024 / 8, 256 / 8));
            assert!(stats.writeback_bytes > 0 && stats.recall_bytes > 0, "{stats:?}");
            assert!(stats.recall_transfers > 0 && stats.recall_plans > 0, "{stats:?}");
            assert!(stats.slot_hits > 0, "{stats:?}");
            assert!(stats.selection_time > std::time::Duration::ZERO, "{stats:?}");
            assert_eq!((stats.host_blocks_in_use, stats.slot_blocks_in_use), (0, 0));
        }
    }
}

/// A prefix cache: a prompt that starts with a finished one's 18 full blocks shares them, skips
/// their prefill and generates the ids it generates without the cache.
#[test]
fn a_prefix_cache_shares_a_finished_prompt_and_keeps_the_ids() {
    let model = load(7);
    let first = prompt_150();
    let longer: Vec<i32> = first.iter().chain(first[..10].iter()).copied().collect();
    let prompts = [first, longer];
    let params = offloaded().kv_capacity_tokens(160).offload_budget_tokens(64);
    let (unshared, off) = generate_each(&model, &params, &prompts);
    let (shared, on) = generate_each(&model, &params.offload_prefix_cache(true), &prompts);
    assert_eq!(shared, unshared);
    assert_eq!(shared.len(), 12);
    assert_eq!((off.prefix_hits, off.host_blocks_cached), (0, 0), "{off:?}");
    assert_eq!((on.prefix_hits, on.prefix_hit_tokens), (1, 144), "{on:?}");
    assert_eq!(on.prefill_tokens, off.prefill_tokens - 144);
}

/// An fp8 host tier holds and recalls 528 bytes for each 2048-byte f32 block of the tiny model
/// (16 bytes of scales, a byte a value); a covering budget recalls the same blocks either way.
#[test]
fn an_fp8_host_tier_moves_fewer_bytes() {
    let model = load(7);
    let params = offloaded().kv_capacity_tokens(160);
    let (_, raw) = generate_150(&model, &params);
    let (ids, fp8) = generate_150(&model, &params.offload_host_codec(HostCodec::Fp8));
    assert_eq!(ids.len(), 12);
    assert!(raw.recall_bytes > 0, "{raw:?}");
    assert_eq!(raw.recall_bytes * 528, fp8.recall_bytes * 2048, "{raw:?} {fp8:?}");
    assert_eq!(raw.writeback_bytes * 528, fp8.writeback_bytes * 2048, "{raw:?} {fp8:?}");
}

#[test]
fn a_request_chooses_its_offloading_within_its_engines() {
    let model = load(7);
    let (dense, _) = generate_150(&model, &EngineParams::default().block_tokens(8));
    let prompt = prompt_150();
    let greedy = SamplingParams::default().temperature(0.0).max_tokens(12).ignore_eos(true);
    let engine = Engine::new(&model, &offloaded().offload_budget_tokens(48)).unwrap();
    for own in [
        greedy.clone().offload_mode(OffloadMode::Off),
        greedy.clone().offload_budget_tokens(1 << 20),
    ] {
        let ids: Vec<i32> =
            engine.submit(&prompt, &own).unwrap().map(|token| token.unwrap().id).collect();
        assert_eq!(ids, dense);
    }
    let error = engine
        .submit(&prompt, &greedy.clone().offload_mode(OffloadMode::HeadWise))
        .err()
        .expect("another mode than the engine's is refused");
    assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
    let plain = Engine::new(&model, &EngineParams::default().block_tokens(8)).unwrap();
    let error = plain
        .submit(&prompt, &greedy.offload_mode(OffloadMode::SoloHead))
        .err()
        .expect("an engine without offloading refuses a request's selection");
    assert!(matches!(error, Error::FailedPrecondition(_)), "{error:?}");
}

#[test]
fn bad_offload_capacities_are_refused_by_name() {
    // The executor and eviction policy are enums: no invalid value can be passed.
    let error = Engine::new(&load(7), &offloaded().offload_host_tokens(-5)).unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
    assert!(error.message().contains("offload_host_tokens"), "{error}");
    let error = Engine::new(&load(7), &offloaded().offload_summary_radius(1.5)).unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
    assert!(error.message().contains("offload_summary_radius"), "{error}");
    // The precision is an enum too; boxes that do not divide the 8-token blocks are refused.
    for boxes in [-1, 3] {
        let error = Engine::new(&load(7), &offloaded().offload_summary_boxes(boxes)).unwrap_err();
        assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
        assert!(error.message().contains("offload_summary_boxes"), "{error}");
    }
}

#[test]
fn adaptive_admission_runs_what_fits_resident_and_says_so() {
    let model = load(7);
    let (dense, _) = generate_150(&model, &EngineParams::default().block_tokens(8));
    let adaptive = offloaded().offload_admission(Admission::IoAdaptive);
    let (ids, stats) = generate_150(&model, &adaptive);
    assert_eq!(ids, dense);
    assert_eq!((stats.admitted_resident, stats.admitted_offloaded), (1, 0), "{stats:?}");
    assert_eq!(stats.sparse_selections, 0);
    assert!(stats.kv_memory_bytes > 0, "{stats:?}");
    let (ids, stats) = generate_150(&model, &offloaded());
    assert_eq!(ids, dense);
    assert_eq!((stats.admitted_resident, stats.admitted_offloaded), (0, 1), "{stats:?}");
    assert!(stats.link_bytes_per_second > 0 && stats.recall_bytes_per_row > 0, "{stats:?}");
    // A least budget to lower to: nothing is lowered for a request that fits.
    let (ids, stats) = generate_150(&model, &adaptive.offload_min_budget_tokens(16));
    assert_eq!(ids, dense);
    assert_eq!((stats.admitted_resident, stats.lowered_budgets), (1, 0), "{stats:?}");
}

/// Two offloaded requests at once at a budget that selects, their decode steps split into two
/// micro-batches: the ids of one micro-batch, and the stats count the split steps.
#[test]
fn micro_batches_give_the_ids_of_one() {
    let model = load(7);
    let run = |count: i32| {
        let engine =
            Engine::new(&model, &offloaded().offload_budget_tokens(48).micro_batches(count))
                .unwrap();
        let greedy = SamplingParams::default().temperature(0.0).max_tokens(12).ignore_eos(true);
        let generations: Vec<_> = (0..2)
            .map(|shift| {
                let prompt: Vec<i32> = (0..150).map(|i| 3 + ((i + shift) * 37) % 297).collect();
                engine.submit(&prompt, &greedy).unwrap()
            })
            .collect();
        let ids: Vec<Vec<i32>> = generations
            .into_iter()
            .map(|generation| generation.map(|token| token.unwrap().id).collect())
            .collect();
        (ids, engine.stats().unwrap())
    };
    let (one, one_stats) = run(1);
    let (two, two_stats) = run(2);
    assert_eq!(two, one);
    assert_eq!(one_stats.split_steps, 0, "{one_stats:?}");
    assert!(two_stats.split_steps > 0, "{two_stats:?}");
    assert!(two_stats.sparse_attended_tokens < two_stats.sparse_context_tokens, "{two_stats:?}");
}

#[test]
fn every_summary_estimator_generates_the_dense_ids_at_a_covering_budget() {
    let model = load(7);
    let (dense, _) = generate_150(&model, &EngineParams::default().block_tokens(8));
    for (boxes, precision) in
        [(4, SummaryPrecision::Int8), (0, SummaryPrecision::Bf16), (0, SummaryPrecision::Int4)]
    {
        let params = offloaded().offload_summary_boxes(boxes).offload_summary_precision(precision);
        let (ids, stats) = generate_150(&model, &params);
        assert_eq!(ids, dense, "{boxes} boxes, {precision:?}");
        assert!(stats.sparse_selections > 0, "{stats:?}");
    }
}

#[test]
fn a_model_over_two_ranks_generates_the_one_rank_tokens() {
    let two = ModelParams::default()
        .random_weights(7)
        .threads(2)
        .backend("cpu")
        .tensor_parallel_size(2);
    let split = Model::load(CONFIG_PATH, &two).expect("two ranks of one KV head each");
    assert_eq!(split.info().unwrap().tensor_parallel_size, 2);
    let sampling = SamplingParams::default().temperature(0.0).max_tokens(8).ignore_eos(true);
    assert_eq!(generate(&split, &sampling), generate(&load(7), &sampling));
    let three = ModelParams::default().random_weights(7).threads(1).tensor_parallel_size(3);
    let error = Model::load(CONFIG_PATH, &three).unwrap_err();
    assert!(matches!(error, Error::InvalidArgument(_)), "{error:?}");
}
