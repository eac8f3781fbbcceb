"""Tiny random decoder rerankers laid out as sentence-transformers 6 publishes them on the hub.

The weights and the tokenizer go through transformers' save_pretrained; every sentence-transformers
file (modules.json, sentence_bert_config.json, config_sentence_transformers.json, 1_LogitScore/) and
the chat template are written by hand, as Qwen/Qwen3-Reranker-0.6B has them, never by the server's code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests import model_factory

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
# Qwen3-Reranker's template in sentence-transformers 6: the prompt is a system message, read as the Instruct.
QWEN3_TEMPLATE = """<|im_start|>system
Judge whether the Document meets the requirements based on the Query and the Instruct provided. \
Note that the answer can only be "yes" or "no".<|im_end|>
<|im_start|>user
<Instruct>: {{ messages | selectattr("role", "eq", "system") | map(attribute="content") | first | default("%s") }}
<Query>: {{ messages | selectattr("role", "eq", "query") | map(attribute="content") | first }}
<Document>: {{ messages | selectattr("role", "eq", "document") | map(attribute="content") | first }}<|im_end|>
<|im_start|>assistant
<think>

</think>

""" % INSTRUCTION
# Typed message parts (content[0].text) and an assistant header only with add_generation_prompt.
STRUCTURED_TEMPLATE = """{%- for m in messages -%}
{%- if m.role == "system" -%}<|im_start|>system
{{ m.content[0].text }}<|im_end|>
{% elif m.role == "query" -%}<|im_start|>user
Query: {{ m.content[0].text }}
{% elif m.role == "document" -%}Document: {{ m.content[0].text }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
Relevant:{%- endif -%}"""
MODULES = [
    {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
    {"idx": 1, "name": "1", "path": "1_LogitScore",
     "type": "sentence_transformers.cross_encoder.modules.logit_score.LogitScore"},
]


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")


def _tiny_causal_lm(dest: Path, template: str | None, positions: int) -> tuple[int, int]:
    """A random Qwen3ForCausalLM whose tokenizer has "yes" and "no" tokens; their ids."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    gpt2 = model_factory.build_tiny_gpt2(dest.parent / f"{dest.name}-tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(str(gpt2), model_max_length=131072)  # Qwen3's: over its positions
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, IM_END]})
    tokenizer.add_tokens(["yes", "no"])
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=positions,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         initializer_range=0.3)  # logits far enough apart that 1e-3 tells pairs apart
    torch.manual_seed(0)
    dest.mkdir(parents=True, exist_ok=True)
    Qwen3ForCausalLM(config).eval().save_pretrained(str(dest))
    tokenizer.save_pretrained(str(dest))
    if template is not None:
        (dest / "chat_template.jinja").write_text(template)
    return tokenizer.convert_tokens_to_ids("yes"), tokenizer.convert_tokens_to_ids("no")


def build_qwen3_reranker(dest: Path, positions: int = 512) -> Path:
    """Qwen/Qwen3-Reranker-0.6B's layout: LogitScore yes/no, a flat chat template, the default prompt "query"."""
    dest = Path(dest)
    yes, no = _tiny_causal_lm(dest, QWEN3_TEMPLATE, positions)
    _write(dest / "modules.json", MODULES)
    _write(dest / "sentence_bert_config.json", {
        "transformer_task": "text-generation",
        "modality_config": {"text": {"method": "forward", "method_output_name": "logits"},
                            "message": {"method": "forward", "method_output_name": "logits", "format": "flat"}},
        "module_output_name": "causal_logits",
    })
    _write(dest / "config_sentence_transformers.json", {
        "__version__": {"sentence_transformers": "6.2.0", "transformers": "5.23.0", "pytorch": "2.13.0"},
        "activation_fn": "torch.nn.modules.linear.Identity",  # as Qwen3-Reranker's: predict gives the raw difference
        "default_prompt_name": "query",
        "model_type": "CrossEncoder",
        "prompts": {"query": INSTRUCTION},
    })
    _write(dest / "1_LogitScore" / "config.json",
           {"true_token_id": yes, "false_token_id": no, "module_input_name": "causal_logits"})
    return dest


def build_one_token_reranker(dest: Path, positions: int = 512) -> Path:
    """The other ways the files configure one: typed message parts, chat-template kwargs, one true token."""
    dest = Path(dest)
    yes, _ = _tiny_causal_lm(dest, STRUCTURED_TEMPLATE, positions)
    _write(dest / "modules.json", MODULES)
    _write(dest / "sentence_bert_config.json", {
        "transformer_task": "text-generation",
        "modality_config": {"text": {"method": "forward", "method_output_name": "logits"},
                            "message": {"method": "forward", "method_output_name": "logits", "format": "structured"}},
        "module_output_name": "causal_logits",
        "processing_kwargs": {"chat_template": {"add_generation_prompt": True}},
    })
    _write(dest / "config_sentence_transformers.json", {
        "activation_fn": "torch.nn.modules.activation.Sigmoid", "default_prompt_name": "relevance",
        "model_type": "CrossEncoder", "prompts": {"relevance": "Is the document relevant to the query?"},
    })
    _write(dest / "1_LogitScore" / "config.json",
           {"true_token_id": yes, "false_token_id": None, "module_input_name": "causal_logits"})
    return dest


def build_plain_causal_reranker(dest: Path, positions: int = 512) -> Path:
    """A causal LM with no sentence-transformers files: scored by its "yes" and "no" tokens."""
    dest = Path(dest)
    _tiny_causal_lm(dest, QWEN3_TEMPLATE, positions)
    return dest


def build_pre_message_reranker(dest: Path, positions: int = 512) -> Path:
    """A save from before modality_config, with no chat template: the pair is a tokenizer pair, the prompt leads it."""
    dest = Path(dest)
    yes, no = _tiny_causal_lm(dest, None, positions)
    _write(dest / "modules.json", MODULES)
    _write(dest / "sentence_bert_config.json", {"transformer_task": "text-generation"})
    _write(dest / "config_sentence_transformers.json", {
        "model_type": "CrossEncoder", "default_prompt_name": "query", "prompts": {"query": "Relevant? "}})
    _write(dest / "1_LogitScore" / "config.json", {"true_token_id": yes, "false_token_id": no})
    return dest
