"""Chat templates as the library renders them, byte for byte against the PyPI jinja2 package
rendering the template itself (as Hugging Face renders chat templates: trim_blocks,
lstrip_blocks, raise_exception): SmolLM2's own template through the text ABI, then every fixture
template in tests/unit/chat/templates through build/bin/pulse-chat-template, spelling variants of
them (recognised), changed copies of them (refused or rendered exactly) and other families
(refused)."""
from __future__ import annotations

import gguf
import jinja2
import pytest


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
def template(smollm2_path) -> jinja2.Template:
    reader = gguf.GGUFReader(str(smollm2_path))
    field = reader.fields["tokenizer.chat_template"]
    source = bytes(field.parts[field.data[0]]).decode()
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    return environment.from_string(source)


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_rendering_matches_jinja2(smollm2_text, template, messages, add_generation_prompt):
    expected = template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                               bos_token="<|im_start|>", eos_token="<|im_end|>")
    assert smollm2_text.apply_template(messages, add_generation_prompt) == expected


# --- Every fixture template (tests/unit/chat/templates, as the models ship them) rendered by
# --- build/bin/pulse-chat-template against jinja2 with Hugging Face's settings.

import functools
import json
import re
import subprocess

FIXTURES = {  # name: (family, bos_token, eos_token)
    "smollm2-instruct": ("chatml", "<|im_start|>", "<|im_end|>"),
    "qwen2-instruct": ("chatml", "", "<|im_end|>"),
    "openhermes-2.5-chatml": ("chatml", "<s>", "<|im_end|>"),
    "qwen2.5-7b-instruct": ("qwen2.5", "", "<|im_end|>"),
    "qwen2.5-coder-instruct": ("qwen2.5", "", "<|im_end|>"),
    "llama3-8b-instruct": ("llama3", "<|begin_of_text|>", "<|eot_id|>"),
    "llama3.1-8b-instruct": ("llama3.1", "<|begin_of_text|>", "<|eot_id|>"),
    "mistral-7b-instruct-v0.2": ("mistral", "<s>", "</s>"),
    "mistral-7b-instruct-v0.3": ("mistral-v3", "<s>", "</s>"),
}
REFUSED = ["zephyr-7b-beta", "gemma-7b-it", "mistral-nemo-instruct-2407"]


def _m(role, content):
    return {"role": role, "content": content}


ALL_CONVERSATIONS = CONVERSATIONS + [
    [_m("system", "Be brief."), _m("user", "Hi"), _m("assistant", "Hello."),
     _m("user", "2+2?"), _m("assistant", "4")],
    [_m("system", "  padded system  "), _m("user", "x")],
    [_m("user", "\u3000\u00a0 unicode spaces \u2028\t\u0085"),
     _m("assistant", " \u200bzero width\u200b \n")],
    [_m("user", "ends in }}"), _m("assistant", "{% endfor %}}} {{ '@@system@@' }}")],
    [_m("user", ""), _m("assistant", "")],
    [_m("user", "backslash-n \\n, a quote ' and \" and \\")],
    [_m("user", "a"), _m("user", "b")],
    [_m("system", "s1"), _m("system", "s2"), _m("user", "u")],
    [_m("user", "a"), _m("narrator", "b")],
    [_m("system", "only a system message")],
    [_m("system", "s"), _m("user", "u1"), _m("assistant", "a1")],
    [],
]


class TemplateRaised(Exception):
    pass


def _raise(message):
    raise TemplateRaised(message)


@functools.lru_cache(maxsize=64)
def compiled(source):
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    environment.globals["raise_exception"] = _raise
    return environment.from_string(source)


def render_jinja(source, messages, add_generation_prompt, bos, eos):
    """("ok", text) or ("raised", message) as Hugging Face's jinja2 rendering gives."""
    try:
        return "ok", compiled(source).render(
            messages=messages, add_generation_prompt=add_generation_prompt, bos_token=bos,
            eos_token=eos)
    except TemplateRaised as error:
        return "raised", str(error)
    except jinja2.exceptions.UndefinedError as error:
        return "undefined", str(error)


def render_ours(tool, tmp_path, source, messages, add_generation_prompt, bos, eos):
    """("ok", text, stderr) or ("error", stderr, stderr) from pulse-chat-template."""
    path = tmp_path / "input.json"
    path.write_text(json.dumps({"template": source, "bos_token": bos, "eos_token": eos,
                                "add_generation_prompt": add_generation_prompt,
                                "messages": messages}), encoding="utf-8")
    result = subprocess.run([str(tool("pulse-chat-template")), str(path)], capture_output=True,
                            timeout=30)
    stderr = result.stderr.decode("utf-8")
    if result.returncode == 0:
        return "ok", result.stdout.decode("utf-8"), stderr
    assert result.returncode == 1, stderr
    return "error", stderr, stderr


def fixture_source(repo_root, name):
    return (repo_root / "tests" / "unit" / "chat" / "templates" / f"{name}.jinja").read_text(
        encoding="utf-8")


def render_ours_batch(tool, tmp_path, cases):
    """pulse-chat-template on many (source, messages, add_generation_prompt, bos, eos) at once:
    ("ok", text) or ("error", "CODE: message") for each."""
    path = tmp_path / "batch.json"
    path.write_text(json.dumps([{"template": source, "bos_token": bos, "eos_token": eos,
                                 "add_generation_prompt": generation, "messages": messages}
                                for source, messages, generation, bos, eos in cases]),
                    encoding="utf-8")
    result = subprocess.run([str(tool("pulse-chat-template")), str(path)], capture_output=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return [("ok", r["text"]) if "text" in r else ("error", r["error"])
            for r in json.loads(result.stdout)]


def compare(tool, tmp_path, source, bos, eos, conversations, generation_prompts=(True, False)):
    """Mismatches between jinja2 and us, as readable strings (empty when all agree)."""
    cases = [(source, messages, generation, bos, eos)
             for messages in conversations for generation in generation_prompts]
    mismatches = []
    for case, ours in zip(cases, render_ours_batch(tool, tmp_path, cases)):
        expected = render_jinja(*case)
        agree = (expected == ours if expected[0] == "ok" else
                 ours[0] == "error" and "INVALID_ARGUMENT" in ours[1] and
                 (expected[0] != "raised" or expected[1] in ours[1]))
        if not agree:
            mismatches.append(f"{case[1]} gen={case[2]}: jinja2 {expected!r} != ours {ours!r}")
    return mismatches


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_renders_as_jinja2(tool, tmp_path, repo_root, name):
    family, bos, eos = FIXTURES[name]
    source = fixture_source(repo_root, name)
    status, _, stderr = render_ours(tool, tmp_path, source, [_m("user", "x")], True, bos, eos)
    assert status == "ok", stderr
    assert f"family: {family}" in stderr
    assert compare(tool, tmp_path, source, bos, eos, ALL_CONVERSATIONS) == []


def test_the_comparison_can_fail(tool, tmp_path, repo_root):
    # jinja2 renders a template whose default system message differs from SmolLM2's, while we
    # render the real one: the comparison must see it.
    source = fixture_source(repo_root, "smollm2-instruct")
    different = source.replace("named SmolLM", "named Smol")
    ours = render_ours(tool, tmp_path, source, [_m("user", "x")], True, "", "")[:2]
    expected = render_jinja(different, [_m("user", "x")], True, "", "")
    assert ours[0] == "ok" and expected[0] == "ok"
    assert ours != expected
    assert compare(tool, tmp_path, different, "", "", [[_m("user", "x")]], (True,)) == []
    assert len(compare(tool, tmp_path, source, "", "", [[_m("user", "x")]], (True,))) == 0


@pytest.mark.parametrize("name", REFUSED)
def test_other_templates_are_refused(tool, tmp_path, repo_root, name):
    status, _, stderr = render_ours(tool, tmp_path, fixture_source(repo_root, name),
                                    [_m("user", "x")], True, "<s>", "</s>")
    assert status == "error" and "UNIMPLEMENTED" in stderr and "unrecognised chat template" in stderr


def test_llama32_with_todays_date_is_refused(tool, tmp_path, repo_root):
    source = fixture_source(repo_root, "llama3.1-8b-instruct").replace(
        '    {%- set date_string = "26 Jul 2024" %}',
        '    {%- if strftime_now is defined %}\n'
        '        {%- set date_string = strftime_now("%d %b %Y") %}\n'
        '    {%- else %}\n        {%- set date_string = "26 Jul 2024" %}\n    {%- endif %}')
    status, _, stderr = render_ours(tool, tmp_path, source, [_m("user", "x")], True, "", "")
    assert status == "error" and "unrecognised chat template" in stderr


DICT_METHODS = {"keys", "values", "items", "get", "pop", "popitem", "copy", "update", "clear",
                "setdefault", "fromkeys"}


def attribute_access(source):
    def repl(match):
        return match.group(0) if match.group(2) in DICT_METHODS else "." + match.group(2)
    return re.sub(r"(?<=[\w\])])\[(['\"])(\w+)\1\]", repl, source)


def swapped_quotes(source):
    """'...' literals as "..." and the other way round, where the literal holds neither quote
    (literals are matched left to right, so each quote is paired)."""
    def repl(match):
        literal = match.group(0)
        if "'" in literal[1:-1] or '"' in literal[1:-1]:
            return literal
        other = '"' if literal[0] == "'" else "'"
        return other + literal[1:-1] + other
    return re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", repl, source)


def roomy_tags(source):
    return (source.replace("{%- ", "{%-   ").replace("{% ", "{%  ").replace(" %}", "  %}")
            .replace("{{- ", "{{-  ").replace("{{ ", "{{  "))


def crlf(source):
    return source.replace("\n", "\r\n") + "\r\n"  # Jinja drops one trailing newline


@pytest.mark.parametrize("variant", [attribute_access, swapped_quotes, roomy_tags, crlf])
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_spelling_variants_are_recognised(tool, tmp_path, repo_root, name, variant):
    family, bos, eos = FIXTURES[name]
    source = variant(fixture_source(repo_root, name))
    assert source != fixture_source(repo_root, name)
    status, _, stderr = render_ours(tool, tmp_path, source, [_m("user", "x")], True, bos, eos)
    assert status == "ok", stderr
    assert f"family: {family}" in stderr
    assert compare(tool, tmp_path, source, bos, eos, ALL_CONVERSATIONS[:6] + ALL_CONVERSATIONS[-6:],
                   (True,)) == []


def mutations(source):
    """Sources that differ from `source` in one place: every string literal (and every text
    between tags) gets an extra character, and a few operators and names are swapped."""
    for match in re.finditer(r"'[^'\\]*'|\"[^\"\\]*\"|%}[^{]+\{|\}\}[^{]+\{", source):
        position = match.start() + (1 if match.group(0)[0] in "'\"" else 2)
        yield source[:position] + "X" + source[position:]
    for old, new in [("==", "!="), ("!=", "=="), ("loop.first", "loop.last"),
                     ("loop.last", "loop.first"), ("trim", "upper"), ("%", "//"),
                     ("add_generation_prompt", "not add_generation_prompt"), ("[1:]", "[2:]")]:
        position = source.find(old)
        while position != -1:
            yield source[:position] + new + source[position + len(old):]
            position = source.find(old, position + 1)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_changed_templates_are_refused_or_rendered_exactly(tool, tmp_path, repo_root, name):
    _, bos, eos = FIXTURES[name]
    conversations = [ALL_CONVERSATIONS[1], ALL_CONVERSATIONS[9], [_m("user", "u")]]
    sources = list(mutations(fixture_source(repo_root, name)))
    recognised = render_ours_batch(tool, tmp_path,
                                   [(source, [_m("user", "x")], True, bos, eos) for source in sources])
    accepted = [source for source, (status, message) in zip(sources, recognised)
                if not (status == "error" and "unrecognised chat template" in message)]
    failures = []
    for source in accepted:
        failures += compare(tool, tmp_path, source, bos, eos, conversations, (True,))
    assert failures == []
    refused = len(sources) - len(accepted)
    assert refused > 0
