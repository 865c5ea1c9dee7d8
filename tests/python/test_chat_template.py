"""SmolLM2's chat template as the library renders it, byte for byte against the template itself
rendered by the PyPI jinja2 package (as Hugging Face renders chat templates)."""
from __future__ import annotations

import gguf
import jinja2
import pytest

import pulse_text

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You answer in one word."},
     {"role": "user", "content": "Capital of Italy?"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "Tell me a joke.\nA short one."}],
    [{"role": "user", "content": "  leading and trailing spaces  "}],
    [{"role": "user", "content": "unicode: 日本語 😀 café"}],
    [{"role": "user", "content": "jinja-looking {{ x }} {% if %} {# c #} text"}],
    [{"role": "user", "content": ""}],
    [{"role": "assistant", "content": "I speak first."}],
]


@pytest.fixture(scope="module")
def library(build_dir, smollm2_path):
    lib = pulse_text.TextLibrary(build_dir / "lib" / "libpulseinfer.so", smollm2_path)
    yield lib
    lib.close()


@pytest.fixture(scope="module")
def template(smollm2_path) -> jinja2.Template:
    reader = gguf.GGUFReader(str(smollm2_path))
    field = reader.fields["tokenizer.chat_template"]
    source = bytes(field.parts[field.data[0]]).decode()
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(source)


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_rendering_matches_jinja2(library, template, messages, add_generation_prompt):
    expected = template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                               bos_token="<|im_start|>", eos_token="<|im_end|>")
    assert library.apply_template(messages, add_generation_prompt) == expected
