use pulseinfer::{ChatMessage, DetokenizeFlags, TokenizeFlags};

use super::model;

#[test]
fn detokenize_gives_back_the_text() {
    let text = "Hello, world! Ünïcödé and  two spaces.";
    let ids = model().tokenize(text, TokenizeFlags::empty()).unwrap();
    assert!(ids.len() > 5);
    assert_eq!(model().detokenize(&ids, DetokenizeFlags::empty()).unwrap(), text);
}

#[test]
fn special_tokens_are_parsed_and_rendered_only_when_asked() {
    let text = "<|im_start|>";
    let parsed = model().tokenize(text, TokenizeFlags::PARSE_SPECIAL).unwrap();
    assert_eq!(parsed.len(), 1);
    assert!(model().tokenize(text, TokenizeFlags::empty()).unwrap().len() > 1);
    assert_eq!(model().detokenize(&parsed, DetokenizeFlags::empty()).unwrap(), "");
    assert_eq!(model().detokenize(&parsed, DetokenizeFlags::RENDER_SPECIAL).unwrap(), text);
}

#[test]
fn empty_text_is_no_tokens() {
    assert_eq!(model().tokenize("", TokenizeFlags::empty()).unwrap(), Vec::<i32>::new());
    assert_eq!(model().detokenize(&[], DetokenizeFlags::empty()).unwrap(), "");
}

#[test]
fn the_chat_template_is_chatml() {
    let messages = [ChatMessage::system("Be brief."), ChatMessage::user("Hi")];
    let prompt = model().apply_chat_template(&messages, true).unwrap();
    assert!(
        prompt.ends_with(
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
             <|im_start|>assistant\n"
        ),
        "{prompt:?}"
    );
    let without = model().apply_chat_template(&messages, false).unwrap();
    assert!(without.ends_with("<|im_start|>user\nHi<|im_end|>\n"), "{without:?}");
}

#[test]
fn a_submitted_chat_is_its_rendered_template() {
    let engine = super::engine();
    let messages = [ChatMessage::user("What is the capital of France?")];
    let prompt = model().apply_chat_template(&messages, true).unwrap();
    let by_hand = super::tokens(
        &mut engine.submit_text(&prompt, TokenizeFlags::PARSE_SPECIAL, &super::greedy(16)).unwrap(),
    );
    let chat = super::tokens(&mut engine.submit_chat(&messages, &super::greedy(16)).unwrap());
    assert_eq!(super::ids(&chat), super::ids(&by_hand));
    assert!(super::text(&chat).contains("Paris"), "{:?}", super::text(&chat));
}
