"""template_notes on real chat templates (Qwen2.5, Qwen3, Llama-3.2, verbatim from their tokenizer
configs) set on the tiny tokenizer, and on small hand-made templates for the other cases."""

from pathlib import Path

import pytest

from agents.model import load_tokenizer
from agents.templates import PROMPT, default_system, injects_date, rewrites_history, template_notes, thinking
from agents.tiny import CHAT_TEMPLATE

DATA = Path(__file__).parent / "data"
QWEN25 = Path(__file__).parent.parent / "agents" / "data" / "qwen2.5_chat_template.jinja"
QWEN3 = DATA / "qwen3_chat_template.jinja"
LLAMA32 = DATA / "llama3.2_chat_template.jinja"
CHATML_PROMPT = (
    "<|im_start|>system\nPROBE_SYSTEM<|im_end|>\n<|im_start|>user\nPROBE_USER<|im_end|>\n<|im_start|>assistant\n"
)


@pytest.fixture
def tokenizer(tiny_path):
    return load_tokenizer(tiny_path)


def with_template(tokenizer, template: str):
    tokenizer.chat_template = template
    return tokenizer


def render(tokenizer, **kwargs) -> str:
    return tokenizer.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True, **kwargs)


def test_tiny_chatml_template_has_no_notes(tokenizer):
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert template_notes(tokenizer) == []


def test_template_files_render_the_trainers_prompt(tokenizer):
    assert render(with_template(tokenizer, QWEN25.read_text())) == CHATML_PROMPT
    assert render(with_template(tokenizer, QWEN3.read_text())) == CHATML_PROMPT
    assert render(tokenizer, enable_thinking=False) == CHATML_PROMPT + "<think>\n\n</think>\n\n"
    llama = render(with_template(tokenizer, LLAMA32.read_text()), date_string="26 Jul 2024")
    assert llama == (
        "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\nPROBE_SYSTEM<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
        "PROBE_USER<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )  # the tiny tokenizer has no bos_token; Llama's own renders <|begin_of_text|> first


def test_qwen3_strips_earlier_thinking_and_has_a_thinking_switch(tokenizer):
    tok = with_template(tokenizer, QWEN3.read_text())
    assert rewrites_history(tok) == "drops the <think> reasoning of"
    assert thinking(tok) == "switch"
    assert not injects_date(tok) and default_system(tok) is None
    history, think = template_notes(tok)
    assert history.startswith("chat template: drops the <think> reasoning of earlier assistant turns")
    assert "one system + one user message" in history and "exactly the prompt generated from" in history
    assert "enable_thinking" in think and "max_new_tokens" in think


def test_llama32_writes_the_date(tokenizer):
    tok = with_template(tokenizer, LLAMA32.read_text())
    assert injects_date(tok)
    assert rewrites_history(tok) is None and thinking(tok) is None
    assert default_system(tok) is None  # its header (knowledge cut-off, date) is there with or without one
    (note,) = template_notes(tok)
    assert "today's date" in note and "another day" in note


def test_qwen25_inserts_a_default_system_message(tokenizer):
    tok = with_template(tokenizer, QWEN25.read_text())
    assert default_system(tok) == "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    (note,) = template_notes(tok)
    assert "default system message" in note and "always gives one" in note


def test_generation_prompt_that_opens_a_think_block(tokenizer):
    forced = CHAT_TEMPLATE.replace("assistant\n{% endif %}", "assistant\n<think>\n{% endif %}")  # QwQ, R1 style
    tok = with_template(tokenizer, forced)
    assert thinking(tok) == "opens"
    (note,) = template_notes(tok)
    assert "opens a <think> block" in note and "max_new_tokens" in note


def test_template_that_drops_assistant_turns(tokenizer):
    skip = CHAT_TEMPLATE.replace("{% for m in messages %}", "{% for m in messages if m['role'] != 'assistant' %}")
    tok = with_template(tokenizer, skip)
    assert rewrites_history(tok) == "drops"
    (note,) = template_notes(tok)
    assert note.startswith("chat template: drops earlier assistant turns")


def test_template_that_rejects_a_system_message(tokenizer):
    strict = "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    (note,) = template_notes(with_template(tokenizer, strict + CHAT_TEMPLATE))
    assert "rejects a system + user conversation" in note
