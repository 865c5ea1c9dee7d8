"""Loading, describing and closing models; their text functions; the errors they raise."""
import pytest

import pulseinfer
from pulseinfer import DetokenizeFlags, TokenizeFlags


def test_info_describes_smollm2(model):
    info = model.info
    assert (info.architecture, info.format, info.stored_type) == ("llama", "gguf", "Q4_1")
    assert (info.num_layers, info.hidden_size, info.vocab_size) == (30, 576, 49152)
    assert (info.tokenizer, info.chat_template, info.backend) == ("gpt2", "chatml", "cpu")
    assert info.tie_word_embeddings is True


def test_tokenize_round_trips_text_and_bytes(model):
    text = "Grüße, 世界! Once upon a time"
    tokens = model.tokenize(text)
    assert model.detokenize(tokens) == text
    assert model.tokenize(text.encode()) == tokens


def test_tokenize_flags_decide_special_tokens(model):
    assert len(model.tokenize("<|im_start|>", TokenizeFlags.PARSE_SPECIAL)) == 1
    assert len(model.tokenize("<|im_start|>", TokenizeFlags.ADD_SPECIAL)) > 1
    [im_end] = model.tokenize("<|im_end|>", TokenizeFlags.PARSE_SPECIAL)
    assert model.detokenize([im_end]) == ""
    assert model.detokenize([im_end], DetokenizeFlags.RENDER_SPECIAL) == "<|im_end|>"


def test_chat_template_formats_a_conversation(model):
    prompt = model.apply_chat_template([{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Hi"}])
    assert prompt.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert not model.apply_chat_template([{"role": "user", "content": "Hi"}],
                                         add_generation_prompt=False).endswith("assistant\n")


def test_missing_file_raises_not_found_with_the_library_message(tmp_path):
    path = tmp_path / "missing.gguf"
    with pytest.raises(pulseinfer.NotFoundError) as raised:
        pulseinfer.Model(path)
    assert raised.value.status == pulseinfer.capi.PULSE_NOT_FOUND
    assert str(raised.value) == f"pulse_model_load: no model at '{path}'"


def test_a_file_that_is_no_model_raises_invalid_model(tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_bytes(b"not a model at all")
    with pytest.raises(pulseinfer.InvalidModelError, match="pulse_model_load"):
        pulseinfer.Model(path)


def test_bad_arguments_raise(model):
    with pytest.raises(pulseinfer.InvalidArgumentError, match="outside the tokenizer's vocab"):
        model.detokenize([model.info.vocab_size])
    with pytest.raises(pulseinfer.InvalidArgumentError, match="unknown detokenize flags"):
        model.detokenize([1], DetokenizeFlags(1 << 7))
    with pytest.raises(OverflowError):
        model.detokenize([2**40])
    with pytest.raises(TypeError):
        model.tokenize(42)
    with pytest.raises(ValueError, match="NUL"):
        model.apply_chat_template([{"role": "user", "content": "a\0b"}])


def test_bad_model_params_raise(tiny_config):
    with pytest.raises(pulseinfer.InvalidArgumentError, match="backend is 'tpu'"):
        pulseinfer.Model(tiny_config, pulseinfer.ModelParams(random_weights=True, backend="tpu"))
    with pytest.raises(TypeError):
        pulseinfer.Model(tiny_config, pulseinfer.ModelParams(random_weights=True, threads=1.5))


def test_random_weights_have_no_tokenizer(tiny_model):
    assert (tiny_model.info.format, tiny_model.info.tokenizer) == ("random", "")
    assert tiny_model.info.vocab_size == 300
    with pytest.raises(pulseinfer.UnsupportedError):
        tiny_model.tokenize("text")


def test_context_manager_closes_the_model(tiny_config):
    params = pulseinfer.ModelParams(random_weights=True, threads=1)
    with pulseinfer.Model(tiny_config, params) as model:
        assert not model.closed
    assert model.closed
    with pytest.raises(ValueError, match="model is closed"):
        model.tokenize("text")
    model.close()  # again: nothing


def test_an_engine_keeps_its_model(tiny_model):
    with pulseinfer.Engine(tiny_model) as engine:
        tiny_model.close()
        sampling = pulseinfer.SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
        assert len(engine.generate([5, 6, 7], sampling).token_ids()) == 4
