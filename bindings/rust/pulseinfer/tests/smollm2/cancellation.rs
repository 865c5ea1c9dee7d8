use std::sync::mpsc;
use std::thread;

use pulseinfer::{Error, FinishReason, TokenizeFlags};

use super::{engine, greedy, PROMPT};

/// Enough tokens that a generation still runs when a test cancels it.
const LONG: i32 = 400;

#[test]
fn cancel_ends_the_iterator_and_keeps_the_tokens() {
    let engine = engine();
    let sampling = greedy(LONG).ignore_eos(true);
    let mut generation = engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &sampling).unwrap();
    generation.next().unwrap().unwrap();
    generation.next().unwrap().unwrap();
    generation.cancel().unwrap();
    assert!(generation.next().is_none());
    let stats = generation.stats().unwrap();
    assert_eq!(stats.finish_reason, Some(FinishReason::Cancelled));
    assert_eq!(stats.generated_tokens, 2);
}

#[test]
fn another_thread_cancels_through_a_canceller() {
    let engine = engine();
    let sampling = greedy(LONG).ignore_eos(true);
    let mut generation = engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &sampling).unwrap();
    let (first_token, wait_for_it) = mpsc::channel();
    let canceller = generation.canceller();
    thread::scope(|scope| {
        scope.spawn(move || {
            wait_for_it.recv().unwrap();
            canceller.cancel().unwrap();
        });
        let mut count = 0;
        for token in &mut generation {
            token.unwrap();
            if count == 0 {
                first_token.send(()).unwrap();
            }
            count += 1;
        }
        assert!(count < LONG, "the generation ran to its end");
    });
    assert_eq!(generation.stats().unwrap().finish_reason, Some(FinishReason::Cancelled));
}

#[test]
fn dropping_an_unfinished_generation_cancels_and_releases_it() {
    let engine = engine();
    let sampling = greedy(LONG).ignore_eos(true);
    let mut generation = engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &sampling).unwrap();
    generation.next().unwrap().unwrap();
    assert_eq!(engine.stats().unwrap().running, 1);
    let canceller = generation.canceller();
    drop(generation);

    let stats = engine.stats().unwrap();
    assert_eq!((stats.running, stats.queued, stats.kv_blocks_in_use), (0, 0, 0));
    assert_eq!(stats.finished_requests, 1);
    assert!(matches!(canceller.cancel(), Err(Error::NotFound(_))));
}

#[test]
fn a_generation_never_read_is_cancelled_when_dropped() {
    let engine = engine();
    drop(engine.submit_text(PROMPT, TokenizeFlags::DEFAULT, &greedy(LONG)).unwrap());
    let stats = engine.stats().unwrap();
    assert_eq!((stats.queued, stats.steps, stats.finished_requests), (0, 0, 1));
}
