use pulseinfer::{Features, ABI_VERSION};

use super::model;

#[test]
fn info_describes_smollm2() {
    let info = model().info().unwrap();
    assert_eq!(info.architecture, "llama");
    assert_eq!(info.format, "gguf");
    assert_eq!(info.stored_type, "Q4_1");
    assert_eq!((info.num_layers, info.num_heads, info.num_kv_heads), (30, 9, 3));
    assert_eq!((info.head_dim, info.hidden_size, info.intermediate_size), (64, 576, 1536));
    assert_eq!(info.vocab_size, 49152);
    assert!(info.tie_word_embeddings);
    assert_eq!(info.parameter_count, 134_515_008);
    assert_eq!(info.tokenizer.as_deref(), Some("gpt2"));
    assert_eq!(info.chat_template.as_deref(), Some("chatml"));
    assert!(info.eos_token.is_some());
}

#[test]
fn a_clone_is_the_same_model() {
    let clone = model().clone();
    assert_eq!(clone.info().unwrap(), model().info().unwrap());
}

#[test]
fn the_library_matches_this_binding() {
    assert_eq!(pulseinfer::abi_version(), ABI_VERSION);
    let version = pulseinfer::version();
    assert_eq!(
        version.split('.').filter(|part| part.parse::<u32>().is_ok()).count(),
        3,
        "{version}"
    );
    assert!(pulseinfer::features().contains(Features::CPU));
}
