"""Tiny random SPLADE models on disk, their files written by hand as the hub has them (never through our code).

The weights are a tiny random BertForMaskedLM with the MiniLM vocabulary (tests.model_factory). A random
MLM head is positive for about half the vocabulary; a trained SPLADE model answers a few hundred
entries. BIAS_SHIFT lowers the head's bias so the tiny model is as sparse as a trained one (tens of
entries per text), which keeps its answers small; shift=0.0 keeps the random head's dense-ish answers.

Two layouts, both still on the hub:
- LEGACY: sentence-transformers 5.0's save, as naver/splade-cocondenser-ensembledistil and
  opensearch-project's SPLADE models have it: `sentence_transformers.sparse_encoder.models.MLMTransformer`,
  then `...models.SpladePooling` with `word_embedding_dimension`; sentence_bert_config.json holds
  max_seq_length and do_lower_case.
- CURRENT: sentence-transformers 6.2's save: `sentence_transformers.base.modules.transformer.Transformer`
  with `transformer_task: "fill-mask"` in sentence_bert_config.json, then
  `sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling` with `embedding_dimension`;
  max_seq_length is the tokenizer's model_max_length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests import model_factory

LEGACY = "legacy"
CURRENT = "current"
BIAS_SHIFT = 0.35  # below the random head's logits (std about 0.1): tens of positive entries per text
VERSIONS = {"sentence_transformers": "5.0.0", "transformers": "4.53.0", "pytorch": "2.7.1"}


def build_splade(dest: Path, layout: str = LEGACY, pooling: str = "max", activation: str = "relu",
                 prompts: dict[str, str] | None = None, default_prompt_name: str | None = None,
                 max_seq_length: int | None = None, max_active_dims: int | None = None,
                 shift: float = BIAS_SHIFT) -> Path:
    """A SPLADE model directory in dest: the MLM weights at its root, then the sentence-transformers files."""
    dest = Path(dest)
    if (dest / "modules.json").is_file():
        return dest
    _weights(dest, shift, None if layout == LEGACY else max_seq_length)
    vocab = json.loads((dest / "config.json").read_text())["vocab_size"]
    current = layout == CURRENT
    transformer = ("sentence_transformers.base.modules.transformer.Transformer" if current
                   else "sentence_transformers.sparse_encoder.models.MLMTransformer")
    splade = ("sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling" if current
              else "sentence_transformers.sparse_encoder.models.SpladePooling")
    _write(dest / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": transformer},
        {"idx": 1, "name": "1", "path": "1_SpladePooling", "type": splade},
    ])
    dimension_key = "embedding_dimension" if current else "word_embedding_dimension"
    _write(dest / "1_SpladePooling" / "config.json",
           {"pooling_strategy": pooling, "activation_function": activation, dimension_key: vocab})
    transformer_config: dict[str, Any] = {"max_seq_length": max_seq_length or 128, "do_lower_case": False}
    if current:
        transformer_config = {"transformer_task": "fill-mask",
                              "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
                              "module_output_name": "token_embeddings"}
    _write(dest / "sentence_bert_config.json", transformer_config)
    st_config: dict[str, Any] = {"model_type": "SparseEncoder", "__version__": VERSIONS,
                                 "prompts": {"query": "", "document": "", **(prompts or {})},
                                 "default_prompt_name": default_prompt_name, "similarity_fn_name": "dot"}
    if max_active_dims is not None:
        st_config["max_active_dims"] = max_active_dims
    _write(dest / "config_sentence_transformers.json", st_config)
    return dest


def _weights(dest: Path, shift: float, max_length: int | None) -> None:
    """The tiny BertForMaskedLM, its MLM bias lowered by shift, saved at dest's root with its tokenizer.

    max_length: the tokenizer's model_max_length, where sentence-transformers 6 saves max_seq_length.
    """
    import torch
    from transformers import AutoTokenizer, BertForMaskedLM

    base = model_factory.build_masked_lm(dest.parent / f"{dest.name}-mlm")
    model = BertForMaskedLM.from_pretrained(str(base)).eval()
    with torch.no_grad():
        model.cls.predictions.bias -= shift
    model.save_pretrained(str(dest))
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    if max_length is not None:
        tokenizer.model_max_length = max_length
    tokenizer.save_pretrained(str(dest))


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))
