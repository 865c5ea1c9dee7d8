use std::sync::Arc;
use std::thread;

use pulseinfer::{Canceller, Engine, Generation, Model, TokenizeFlags};

use super::{engine, greedy, ids, tokens};

const PROMPTS: [&str; 3] = ["Once upon a time", "The best way to learn", "In 1969, the"];

#[test]
fn handles_are_send_and_sync_as_the_header_allows() {
    fn send_sync<T: Send + Sync>() {}
    fn send<T: Send>() {}
    send_sync::<Model>();
    send_sync::<Engine>();
    send_sync::<Canceller<'static>>();
    send::<Generation<'static>>();
}

#[test]
fn threads_sharing_an_engine_get_what_each_would_alone() {
    let engine = engine();
    let alone: Vec<Vec<i32>> = PROMPTS
        .iter()
        .map(|prompt| {
            ids(&tokens(
                &mut engine.submit_text(prompt, TokenizeFlags::DEFAULT, &greedy(8)).unwrap(),
            ))
        })
        .collect();
    let together: Vec<Vec<i32>> = thread::scope(|scope| {
        let threads: Vec<_> = PROMPTS
            .iter()
            .map(|prompt| {
                let engine = &engine;
                scope.spawn(move || {
                    let mut generation =
                        engine.submit_text(prompt, TokenizeFlags::DEFAULT, &greedy(8)).unwrap();
                    ids(&tokens(&mut generation))
                })
            })
            .collect();
        threads.into_iter().map(|thread| thread.join().unwrap()).collect()
    });
    assert_eq!(together, alone);
    assert_eq!(engine.stats().unwrap().finished_requests, 6);
}

#[test]
fn an_engine_in_an_arc_outlives_the_thread_that_made_it() {
    let engine = Arc::new(engine());
    let worker = {
        let engine = Arc::clone(&engine);
        thread::spawn(move || {
            let mut generation =
                engine.submit_text(PROMPTS[0], TokenizeFlags::DEFAULT, &greedy(4)).unwrap();
            tokens(&mut generation).len()
        })
    };
    assert_eq!(worker.join().unwrap(), 4);
    assert_eq!(engine.stats().unwrap().finished_requests, 1);
}

#[test]
fn generations_dropped_while_another_thread_steps_leave_nothing_behind() {
    let engine = engine();
    let long = greedy(48).ignore_eos(true);
    thread::scope(|scope| {
        let stepper = scope.spawn(|| {
            let mut generation =
                engine.submit_text(PROMPTS[0], TokenizeFlags::DEFAULT, &long).unwrap();
            tokens(&mut generation).len()
        });
        // Each is dropped after its first token, while its events may be in delivery on the
        // stepping thread.
        for prompt in PROMPTS.iter().cycle().take(6) {
            let mut generation = engine.submit_text(prompt, TokenizeFlags::DEFAULT, &long).unwrap();
            generation.next().unwrap().unwrap();
        }
        assert_eq!(stepper.join().unwrap(), 48);
    });
    let stats = engine.stats().unwrap();
    assert_eq!((stats.queued, stats.running, stats.kv_blocks_in_use), (0, 0, 0));
    assert_eq!(stats.finished_requests, 7);
}
