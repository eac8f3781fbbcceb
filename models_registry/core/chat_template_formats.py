"""What a chat template's text says of the answers it expects: a reasoning block, a tool-call format.

Read by core.model_layout when a model directory is registered; the markers are the ones the
OpenAI routes split answers at (api.openai.reasoning_split, api.openai.tool_calls).
"""

from __future__ import annotations

THINK_START, THINK_END = "<think>", "</think>"  # the reasoning block's tags (api.openai.reasoning_split)
# The markers of the tool-call formats (api.openai.tool_calls) a chat template renders.
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"  # hermes (Hermes, Qwen)
MISTRAL_TOOL_CALLS = "[TOOL_CALLS]"
PYTHON_TAG, LLAMA3_HEADER = "<|python_tag|>", "<|start_header_id|>"


def reasoning_format_of(template: str | None) -> str | None:
    """The format a chat template's text implies: None when it never mentions `<think>`.

    The generation prompt is what follows the template's last `add_generation_prompt` test: when
    its last `<think>` is not closed after it, the answer starts inside the block. Qwen3's closed
    `<think>\\n\\n</think>` there (thinking switched off) does not open one.
    """
    if not template or THINK_START not in template:
        return None
    at = template.rfind("add_generation_prompt")
    tail = template[at:] if at >= 0 else template
    return "think-open" if tail.rfind(THINK_START) > tail.rfind(THINK_END) else "think"


def tool_call_format_of(template: str | None) -> str | None:
    """The tool-call format a chat template's text renders: None when it never reads `tools`.

    The markers it writes tell the family: `<tool_call>` hermes, `[TOOL_CALLS]` mistral, `<|python_tag|>`
    or Llama 3's headers llama3-json; a template that reads tools in none of them is "none" (set the task's
    tool_call_format).
    """
    if not template or "tools" not in template:
        return None
    if TOOL_CALL_OPEN in template:
        return "hermes"
    if MISTRAL_TOOL_CALLS in template:
        return "mistral"
    if PYTHON_TAG in template or LLAMA3_HEADER in template:
        return "llama3-json"
    return "none"
