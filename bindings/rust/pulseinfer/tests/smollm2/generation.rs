use pulseinfer::{ChatMessage, DetokenizeFlags, FinishReason, SamplingParams, TokenizeFlags};

use super::{engine, greedy, ids, model, text, tokens, PROMPT};

#[test]
fn streamed_text_is_the_detokenized_ids() {
    let engine = engine();
    let generated =
        tokens(&mut engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &greedy(16)).unwrap());
    assert_eq!(generated.len(), 16);
    let detokenized = model().detokenize(&ids(&generated), DetokenizeFlags::empty()).unwrap();
    assert_eq!(text(&generated), detokenized);
    assert!(!detokenized.trim().is_empty());
}

#[test]
fn greedy_is_deterministic_from_text_or_tokens() {
    let engine = engine();
    let first =
        tokens(&mut engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &greedy(8)).unwrap());
    let prompt = model().tokenize(PROMPT, TokenizeFlags::DEFAULT).unwrap();
    let second = tokens(&mut engine.submit(&prompt, &greedy(8)).unwrap());
    assert_eq!(first, second);
}

#[test]
fn sampling_with_a_seed_is_reproducible() {
    let engine = engine();
    let sampling = SamplingParams::default()
        .temperature(0.9)
        .top_k(40)
        .top_p(0.95)
        .min_p(0.02)
        .repetition_penalty(1.1)
        .seed(1234)
        .ignore_eos(true)
        .max_tokens(8);
    let run =
        || tokens(&mut engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &sampling).unwrap());
    assert_eq!(run(), run());
}

#[test]
fn a_stop_string_ends_the_text_before_it() {
    let engine = engine();
    let full = text(&tokens(
        &mut engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &greedy(16)).unwrap(),
    ));
    // The second word of the greedy text, with its leading space.
    let start = full[1..].find(' ').expect("the text has two words") + 1;
    let end = full[start + 1..].find(' ').map_or(full.len(), |end| start + 1 + end);
    let stop = &full[start..end];

    let sampling = greedy(16).stop_strings([stop]);
    let mut generation = engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &sampling).unwrap();
    let stopped = text(&tokens(&mut generation));
    assert_eq!(stopped, full[..full.find(stop).unwrap()], "stop string {stop:?} in {full:?}");
    assert_eq!(generation.stats().unwrap().finish_reason, Some(FinishReason::StopString));
}

#[test]
fn a_stop_token_ends_the_generation_with_it() {
    let engine = engine();
    let full =
        ids(&tokens(&mut engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &greedy(8)).unwrap()));
    let stop = full[3];
    let mut generation = engine
        .submit_text(PROMPT, TokenizeFlags::DEFAULT, &greedy(8).stop_token_ids([stop]))
        .unwrap();
    let stopped = ids(&tokens(&mut generation));
    assert_eq!(stopped, full[..=full.iter().position(|&id| id == stop).unwrap()]);
    assert_eq!(generation.stats().unwrap().finish_reason, Some(FinishReason::StopToken));
}

#[test]
fn a_chat_answers_through_the_template() {
    let engine = engine();
    let prompt = model()
        .apply_chat_template(&[ChatMessage::user("What is the capital of France?")], true)
        .unwrap();
    let mut generation =
        engine.submit_text(&prompt, TokenizeFlags::PARSE_SPECIAL, &greedy(16)).unwrap();
    let answer = text(&tokens(&mut generation));
    assert!(answer.contains("Paris"), "{answer:?}");
    // The model ends its turn with <|im_end|>, its end-of-sequence token, which renders nothing.
    assert_eq!(generation.stats().unwrap().finish_reason, Some(FinishReason::StopToken));
}

#[test]
fn a_batch_gives_each_prompt_what_it_gives_alone_in_order() {
    let engine = engine();
    let prompts = ["Once upon a time", "The capital of France is", "def fibonacci(n):"];
    let sampling = greedy(6).ignore_eos(true);
    let alone: Vec<Vec<i32>> = prompts
        .iter()
        .map(|prompt| {
            ids(&tokens(
                &mut engine.submit_text(prompt, TokenizeFlags::empty(), &sampling).unwrap(),
            ))
        })
        .collect();
    let batch = engine.generate_batch(&prompts, TokenizeFlags::empty(), &sampling).unwrap();
    assert_eq!(batch.iter().map(|c| c.tokens.clone()).collect::<Vec<_>>(), alone);
    for completion in &batch {
        assert_eq!(completion.stats.generated_tokens, 6);
        let text = model().detokenize(&completion.tokens, DetokenizeFlags::empty()).unwrap();
        assert_eq!(text, completion.text);
    }
    assert!(engine.generate_batch(&["fine", ""], TokenizeFlags::empty(), &sampling).is_err());
    let stats = engine.stats().unwrap();
    assert_eq!((stats.running, stats.queued), (0, 0));
}
