"""Tiny random-weight ColBERT-style (multi-vector) models laid out as their hub repositories are.

The files are written here by hand as the hub has them, never through the server's code:
- `mve`, `mve-min`: sentence-transformers 6.2's own MultiVectorEncoder save (modules.json Transformer ->
  Dense over token_embeddings -> MultiVectorMask -> Normalize; the lengths and `query_expansion` in
  sentence_bert_config.json; `[Q] `/`[D] ` prompts in config_sentence_transformers.json).
- `pylate`: a PyLate save of the sentence-transformers 4 era (lightonai/GTE-ModernColBERT-v1's shape):
  only Transformer -> `pylate.models.Dense.Dense`, and `query_prefix`, `document_prefix`, `query_length`,
  `document_length`, `attend_to_expansion_tokens`, `skiplist_words` at the top of
  config_sentence_transformers.json; the prefixes added to the tokenizer as PyLate's `add_tokens` does.
- `pylate-v3`: PyLate 3's save (`model_type: ColBERT`, current module paths, `do_query_expansion`).
The weights are random: tests compare our answers with sentence-transformers' MultiVectorEncoder.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import model_factory

LEGACY = "sentence_transformers.models."
TRANSFORMER = "sentence_transformers.base.modules.transformer.Transformer"
DENSE = "sentence_transformers.base.modules.dense.Dense"
MASK = "sentence_transformers.multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask"
NORMALIZE = "sentence_transformers.base.modules.normalize.Normalize"
PYLATE_DENSE = "pylate.models.Dense.Dense"
IDENTITY = "torch.nn.modules.linear.Identity"
PUNCTUATION = list(string.punctuation)
VERSIONS = {"pytorch": "2.13.0+cpu", "transformers": "5.23.0"}


@dataclass(frozen=True)
class Layout:
    """One hub layout of a ColBERT-style model: which files, and the knobs they carry."""

    name: str
    form: str  # "mve" (sentence-transformers 6.2), "pylate" (PyLate, ST 4 era), "pylate-v3"
    out_features: int = 16
    sbert_config: dict[str, Any] = field(default_factory=dict)  # the mve form's multi-vector keys
    skiplist: list[str] = field(default_factory=lambda: list(PUNCTUATION))
    prompts: dict[str, str] = field(default_factory=lambda: {"query": "[Q] ", "document": "[D] "})
    prefix_tokens: bool = True  # the prompts are tokens of the tokenizer (PyLate adds them; an mve save keeps them)
    pylate_config: dict[str, Any] = field(default_factory=dict)  # PyLate's top-level keys
    similarity: str | None = None


LAYOUTS = {
    # a native save: fixed-width [MASK] expansion to 16 tokens (not attended), punctuation skipped in documents
    "mve": Layout("mve", "mve", sbert_config={
        "document_length": 40, "query_expansion": {"strategy": "fixed", "attend": False, "token": None, "length": 16}}),
    # expansion as a floor only, attended, a query ceiling, no skiplist, MeanMaxSim, prompts as plain text
    "mve-min": Layout("mve-min", "mve", out_features=12, skiplist=[], prefix_tokens=False, similarity="meanmaxsim",
                      sbert_config={"query_length": 24, "document_length": 48,
                                    "query_expansion": {"strategy": "min", "attend": True, "token": None,
                                                        "length": 12}}),
    # lightonai/GTE-ModernColBERT-v1's files (PyLate on sentence-transformers 4)
    "pylate": Layout("pylate", "pylate", prompts={}, pylate_config={
        "similarity_fn_name": "MaxSim", "query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": 16,
        "document_length": 40, "attend_to_expansion_tokens": False, "skiplist_words": list(PUNCTUATION)}),
    # PyLate 3: model_type ColBERT, expansion tokens attended
    "pylate-v3": Layout("pylate-v3", "pylate-v3", out_features=8, prompts={}, pylate_config={
        "similarity_fn_name": "MaxSim", "query_prefix": "[Q] ", "document_prefix": "[D] ", "query_length": 12,
        "document_length": 30, "attend_to_expansion_tokens": True, "skiplist_words": list(PUNCTUATION),
        "do_query_expansion": True}),
}


def build(layout: Layout, dest: Path) -> Path:
    """The layout's directory in dest: random weights, its prefix tokens, and its files as the hub has them."""
    dest = Path(dest)
    if (dest / "modules.json").is_file():
        return dest
    base = model_factory.build_feature_extractor(dest.parent / f"{dest.name}-base")
    _copy_with_prefix_tokens(base, dest, layout)
    dense_path = "1_Dense"
    dense: dict[str, Any] = {"in_features": 32, "out_features": layout.out_features, "bias": False,
                             "activation_function": IDENTITY}
    if layout.form == "mve":
        modules = [(TRANSFORMER, ""), (DENSE, dense_path), (MASK, "2_MultiVectorMask"), (NORMALIZE, "3_Normalize")]
        dense |= {"module_input_name": "token_embeddings", "module_output_name": "token_embeddings"}
        _write(dest / "2_MultiVectorMask" / "config.json", {
            "skiplist_words": layout.skiplist, "skiplist_tasks": ["document"], "keep_only_token_ids": None})
        _write(dest / "3_Normalize" / "config.json",
               {"module_input_name": "token_embeddings", "module_output_name": "token_embeddings"})
        _write(dest / "sentence_bert_config.json", {
            "transformer_task": "feature-extraction",
            "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
            "module_output_name": "token_embeddings", **layout.sbert_config})
        st_config = {"__version__": {**VERSIONS, "sentence_transformers": "6.2.0"}, "default_prompt_name": None,
                     "model_type": "MultiVectorEncoder", "prompts": layout.prompts,
                     "similarity_fn_name": layout.similarity}
    elif layout.form == "pylate":
        modules = [(LEGACY + "Transformer", ""), (PYLATE_DENSE, dense_path)]
        # PyLate leaves the query length less its prefix token as the Transformer's max_seq_length
        _write(dest / "sentence_bert_config.json",
               {"max_seq_length": layout.pylate_config["document_length"] - 1, "do_lower_case": False})
        st_config = {"__version__": {**VERSIONS, "sentence_transformers": "4.0.2"}, "prompts": {},
                     "default_prompt_name": None, **layout.pylate_config}
    else:
        modules = [(TRANSFORMER, ""), (PYLATE_DENSE, dense_path)]
        dense |= {"use_residual": False, "module_input_name": "token_embeddings",
                  "module_output_name": "token_embeddings"}
        _write(dest / "sentence_bert_config.json", {
            "transformer_task": "feature-extraction",
            "modality_config": {"text": {"method": "forward", "method_output_name": "last_hidden_state"}},
            "module_output_name": "token_embeddings", "max_seq_length": layout.pylate_config["document_length"] - 1,
            "do_lower_case": False})
        st_config = {"__version__": {**VERSIONS, "sentence_transformers": "5.1.2"}, "model_type": "ColBERT",
                     "prompts": {}, "default_prompt_name": None, **layout.pylate_config}
    _write(dest / dense_path / "config.json", dense)
    _dense_weights(dest / dense_path, dense)
    _write(dest / "modules.json", [{"idx": i, "name": str(i), "path": path, "type": kind}
                                   for i, (kind, path) in enumerate(modules)])
    _write(dest / "config_sentence_transformers.json", st_config)
    return dest


def _copy_with_prefix_tokens(base: Path, dest: Path, layout: Layout) -> None:
    """The base model saved in dest, with the prefixes added to its vocabulary and embeddings as PyLate adds them."""
    import torch
    from transformers import AddedToken, AutoTokenizer, BertModel

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    model = BertModel.from_pretrained(str(base))
    prefixes = [layout.pylate_config.get("query_prefix"), layout.pylate_config.get("document_prefix")]
    if layout.form == "mve" and layout.prefix_tokens:
        # a converted PyLate model saved again: sentence-transformers registered its prefixes as special tokens
        tokenizer.add_special_tokens({"additional_special_tokens": [
            AddedToken(p, normalized=False, special=True) for p in layout.prompts.values()]})
    elif any(prefixes):
        tokenizer.add_tokens([p for p in prefixes if p])  # PyLate's ColBERT.__init__ does exactly this
    if len(tokenizer) != model.config.vocab_size:
        torch.manual_seed(1)
        model.resize_token_embeddings(len(tokenizer))
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(dest))
    model.save_pretrained(str(dest))


def _dense_weights(folder: Path, config: dict[str, Any]) -> None:
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(7)
    weight = torch.randn(config["out_features"], config["in_features"], generator=generator) * 0.3
    save_file({"linear.weight": weight}, str(folder / "model.safetensors"))


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))
