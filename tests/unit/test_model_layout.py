"""What a model directory's files say, parsed from file texts alone (no disk, no torch)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from models_registry.catalog import model_settings
from models_registry.core import model_layout
from models_registry.core.model_layout import ModelLayout, UnsupportedLayout, parse_layout


def reader(files: dict[str, Any]):
    return lambda path: json.dumps(files[path]) if path in files else None


def modules(*kinds_and_paths: tuple[str, str], prefix: str = "sentence_transformers.models.") -> list[dict[str, Any]]:
    return [{"idx": i, "name": str(i), "path": path, "type": prefix + kind} for i, (kind, path) in enumerate(kinds_and_paths)]


def test_a_directory_without_sentence_transformers_files_says_only_its_padding_side() -> None:
    layout = parse_layout(reader({"tokenizer_config.json": {"padding_side": "left"}}))
    assert layout == ModelLayout(padding_side="left")
    assert layout.said() == {"padding_side": "left"}


def test_legacy_boolean_pooling_keys_and_the_current_mode_name_read_alike() -> None:
    legacy = {"word_embedding_dimension": 8, "pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}
    current = {"embedding_dimension": 8, "pooling_mode": "cls", "include_prompt": True}
    for config in (legacy, current):
        layout = parse_layout(reader({"modules.json": modules(("Transformer", ""), ("Pooling", "1_Pooling")),
                                      "1_Pooling/config.json": config}))
        assert layout.pooling == ("cls",) and layout.include_prompt is True and layout.normalize is False


def test_several_legacy_modes_concatenate_in_sentence_transformers_order() -> None:
    config = {"pooling_mode_max_tokens": True, "pooling_mode_cls_token": True}
    layout = parse_layout(reader({"modules.json": modules(("Transformer", ""), ("Pooling", "1_Pooling")),
                                  "1_Pooling/config.json": config}))
    assert layout.pooling == ("cls", "max") and layout.pooling_name == "cls+max"


def test_no_mode_set_in_the_legacy_form_is_mean() -> None:
    layout = parse_layout(reader({"modules.json": modules(("Transformer", ""), ("Pooling", "1_Pooling")),
                                  "1_Pooling/config.json": {"word_embedding_dimension": 8}}))
    assert layout.pooling == ("mean",)


def test_dense_normalize_prompts_and_the_transformer_config() -> None:
    files = {
        "modules.json": modules(("Transformer", ""), ("Pooling", "1_Pooling"), ("Dense", "2_Dense"),
                                ("Normalize", "3_Normalize"), prefix="sentence_transformers.base.modules."),
        "1_Pooling/config.json": {"pooling_mode": "lasttoken", "include_prompt": False},
        "2_Dense/config.json": {"in_features": 8, "out_features": 4, "bias": False,
                                "activation_function": "torch.nn.modules.linear.Identity"},
        "sentence_bert_config.json": {"max_seq_length": 40, "do_lower_case": True},
        "config_sentence_transformers.json": {"prompts": {"query": "q: ", "document": ""}, "default_prompt_name": "query"},
    }
    layout = parse_layout(reader(files))
    assert layout.dense == (model_layout.DenseLayer("2_Dense", 8, 4, False, "torch.nn.modules.linear.Identity"),)
    assert (layout.normalize, layout.max_seq_length, layout.do_lower_case) == (True, 40, True)
    assert layout.include_prompt is False and layout.default_prompt_name == "query"
    assert ModelLayout.from_json(json.loads(json.dumps(layout.to_json()))) == layout
    assert layout.said()["dense"] == ["8->4 Identity"]


@pytest.mark.parametrize("files, message", [
    ({"modules.json": modules(("Transformer", ""), ("LSTM", "1_LSTM"))}, "LSTM"),
    ({"modules.json": [{"idx": 0, "path": "", "type": "my_package.MyTransformer"}]}, "my_package.MyTransformer"),
    ({"modules.json": modules(("Pooling", "1_Pooling"))}, "start with a Transformer"),
    ({"modules.json": modules(("Transformer", ""), ("Pooling", "1_Pooling")),
      "1_Pooling/config.json": {"pooling_mode": "median"}}, "median"),
    ({"modules.json": modules(("Transformer", ""), ("Dense", "2_Dense")),
      "2_Dense/config.json": {"in_features": 2, "out_features": 2, "activation_function": "my.Act"}}, "my.Act"),
    ({"modules.json": modules(("Transformer", "")),
      "config_sentence_transformers.json": {"prompts": {"query": "q"}, "default_prompt_name": "passage"}}, "passage"),
    ({"modules.json": "{not json"}, "not a list"),
])
def test_what_the_server_does_not_compute_is_refused_by_name(files: dict[str, Any], message: str) -> None:
    with pytest.raises(UnsupportedLayout, match=message):
        parse_layout(reader(files))


def test_the_operator_wins_then_the_files_then_the_default() -> None:
    layout = ModelLayout(kind="SentenceTransformer", pooling=("cls",), normalize=True)
    assert model_settings.pooling_of("", layout) == "cls" and model_settings.pooling_of("max", layout) == "max"
    assert model_settings.pooling_of("", ModelLayout()) == "mean"
    assert model_settings.normalize_of(None, layout) is True and model_settings.normalize_of(False, layout) is False
    assert model_settings.normalize_of(None, ModelLayout(), fallback=True) is True


def test_prompts_from_the_files_sit_under_the_operators_and_the_default_prompt_applies_unless_one_is_set() -> None:
    layout = ModelLayout(kind="SentenceTransformer", prompts={"query": "q: ", "passage": "p: "},
                         default_prompt_name="passage")
    merged = model_settings.with_prompts(layout, {"prompts": {"query": "mine: "}})
    assert merged["prompts"] == {"query": "mine: ", "document": "", "passage": "p: "}
    assert merged["prompt_name"] == "passage"
    assert "prompt_name" not in model_settings.with_prompts(layout, {"prompt": "fixed: "})
    assert model_settings.with_prompts(ModelLayout(), {"a": 1}) == {"a": 1}


QWEN3_TAIL = ("{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- if enable_thinking is defined and "
              "enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}")
R1_TAIL = "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
HISTORY = "{% set content = message['content'].split('</think>')[-1] %}{{ '<think>' + reasoning + '</think>' }}"


@pytest.mark.parametrize(("template", "said"), [
    ("{{ messages[0]['content'] }}{% if add_generation_prompt %}Assistant:{% endif %}", None),
    (HISTORY + QWEN3_TAIL, "think"),  # the model writes <think>; the closed block there switches thinking off
    (HISTORY + R1_TAIL, "think-open"),  # the generation prompt opened the block: the answer starts in it
    ("<think>{{ messages[-1]['content'] }}", "think-open"),  # no generation prompt test: it ends inside the block
])
def test_the_chat_template_says_the_reasoning_format(template: str, said: str | None) -> None:
    layout = parse_layout(reader({"tokenizer_config.json": {"chat_template": template}}))
    assert layout.reasoning_format == said
    assert layout.said().get("reasoning_format") == said


def test_chat_template_jinja_and_named_templates_are_read_as_transformers_does() -> None:
    files = {"chat_template.jinja": HISTORY + R1_TAIL, "tokenizer_config.json": json.dumps({"padding_side": "left"})}
    assert parse_layout(files.get).reasoning_format == "think-open"
    named = [{"name": "tool_use", "template": "<think>"}, {"name": "default", "template": HISTORY + QWEN3_TAIL}]
    assert parse_layout(reader({"tokenizer_config.json": {"chat_template": named}})).reasoning_format == "think"


@pytest.mark.parametrize(("template", "said"), [
    ("{{ messages[0]['content'] }}", None),  # never reads tools
    ("{% for tool in tools %}{{ tool | tojson }}{% endfor %}<tool_call>\n{\"name\": ...}\n</tool_call>", "hermes"),
    ("{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]", "mistral"),
    ("<|start_header_id|>user<|end_header_id|>{% if tools %}{{ tools | tojson }}{% endif %}<|python_tag|>",
     "llama3-json"),
    ("{% if tools %}{{ tools | tojson }}{% endif %}<function_call>", "none"),  # reads tools, in no format we read
])
def test_the_chat_template_says_the_tool_call_format(template: str, said: str | None) -> None:
    layout = parse_layout(reader({"tokenizer_config.json": {"chat_template": template}}))
    assert layout.tool_call_format == said
    assert layout.said().get("tool_call_format") == said


def test_with_tools_a_named_tool_use_template_says_the_format() -> None:
    named = [{"name": "default", "template": "{{ messages[0]['content'] }}"},
             {"name": "tool_use", "template": "{% for tool in tools %}{{ tool }}{% endfor %}<tool_call>"}]
    layout = parse_layout(reader({"tokenizer_config.json": {"chat_template": named}}))
    assert layout.tool_call_format == "hermes" and layout.reasoning_format is None
    assert parse_layout({"chat_template.jinja": "{{ messages }}"}.get).tool_call_format is None
