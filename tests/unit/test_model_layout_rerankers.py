"""core.model_layout on decoder rerankers' files: the LogitScore tokens and how the Transformer renders a pair."""

from __future__ import annotations

import json

from models_registry.core.model_layout import ModelLayout, parse_layout

MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
    {"idx": 1, "name": "1", "path": "1_LogitScore",
     "type": "sentence_transformers.cross_encoder.modules.logit_score.LogitScore"},
]


def reader(files: dict[str, object]):
    return lambda path: json.dumps(files[path]) if path in files else None


def test_qwen3_reranker_files() -> None:
    layout = parse_layout(reader({
        "modules.json": MODULES,
        "sentence_bert_config.json": {
            "transformer_task": "text-generation",
            "modality_config": {"text": {"method": "forward", "method_output_name": "logits"},
                                "message": {"method": "forward", "method_output_name": "logits", "format": "flat"}},
            "processing_kwargs": {"chat_template": {"add_generation_prompt": True}},
        },
        "config_sentence_transformers.json": {"model_type": "CrossEncoder", "default_prompt_name": "query",
                                              "prompts": {"query": "Given a web search query"}},
        "1_LogitScore/config.json": {"true_token_id": 9693, "false_token_id": 2152},
    }))
    assert (layout.kind, layout.transformer_task) == ("CrossEncoder", "text-generation")
    assert layout.logit_tokens == (9693, 2152)
    assert layout.modalities == ("text", "message") and layout.message_format == "flat"
    assert layout.chat_template_kwargs == {"add_generation_prompt": True}
    assert ModelLayout.from_json(json.loads(json.dumps(layout.to_json()))) == layout


def test_a_config_without_modality_config_is_text_only_and_a_null_false_token_is_kept() -> None:
    layout = parse_layout(reader({
        "modules.json": MODULES,
        "sentence_bert_config.json": {"transformer_task": "text-generation"},
        "1_LogitScore/config.json": {"true_token_id": 7, "false_token_id": None},
    }))
    assert layout.modalities == ("text",) and layout.message_format == "" and layout.chat_template_kwargs == {}
    assert layout.logit_tokens == (7, None)


def test_a_directory_without_modules_says_nothing_of_modalities() -> None:
    assert parse_layout(reader({})).modalities == ()
