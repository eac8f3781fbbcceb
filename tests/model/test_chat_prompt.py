"""The worker's chat prompt: tools and tool turns rendered by the model's own template, or a 400 that says why."""

from __future__ import annotations

from typing import Any

import pytest

from models_registry.core.errors import InvalidInput
from tests import model_factory

pytest.importorskip("transformers")
from models_registry.inference.streaming import chat_prompt

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny GPT-2's tokenizer with the Hermes-style tools template and with the plain one."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("chat-prompt")
    tools = model_factory.build_tiny_gpt2(root / "tools", chat_template=model_factory.TOOLS_TEMPLATE)
    tokenizer = AutoTokenizer.from_pretrained(str(tools))
    plain = AutoTokenizer.from_pretrained(str(tools))
    plain.chat_template = model_factory.CHAT_TEMPLATE
    return {"tools": tokenizer, "plain": plain}


def test_tools_and_tool_turns_reach_the_template(tokenizers: dict[str, Any]) -> None:
    messages = [{"role": "user", "content": "Rome?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                      "arguments": {"city": "Rome"}}}]},
                {"role": "tool", "content": "sunny", "tool_call_id": "call_1"}]
    prompt = chat_prompt(tokenizers["tools"], messages, [WEATHER])
    assert '"name": "get_weather"' in prompt.split("\n")[0]  # the tools, listed by the template
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>' in prompt
    assert "tool (call_1): sunny\n" in prompt and prompt.endswith("assistant:")
    assert "Functions" not in chat_prompt(tokenizers["tools"], messages[:1])


def test_a_template_that_reads_no_tools_is_a_400(tokenizers: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput, match="does not use tools"):
        chat_prompt(tokenizers["plain"], [{"role": "user", "content": "Rome?"}], [WEATHER])
    assert chat_prompt(tokenizers["plain"], [{"role": "user", "content": "Rome?"}], None) == "user: Rome?\nassistant:"
