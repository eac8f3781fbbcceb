"""Tiny random-weight embedding models laid out as their families' hub repositories are.

Each family's sentence-transformers files are written here by hand, as the hub has them (legacy
`sentence_transformers.models.X` types and boolean pooling keys for the older families, the current
module paths and `pooling_mode` for the newer ones), never through the server's own code. The weights
are random: tests compare our answers with sentence-transformers' on the same directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import model_factory

LEGACY = "sentence_transformers.models."
CURRENT = {
    "Transformer": "sentence_transformers.base.modules.transformer.Transformer",
    "Pooling": "sentence_transformers.sentence_transformer.modules.pooling.Pooling",
    "Dense": "sentence_transformers.base.modules.dense.Dense",
    "Normalize": "sentence_transformers.base.modules.normalize.Normalize",
}
QWEN_QUERY = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:"
BGE_QUERY = "Represent this sentence for searching relevant passages: "


def legacy_pooling(dimension: int, mode: str, **extra: Any) -> dict[str, Any]:
    """1_Pooling/config.json in its legacy form: one boolean per mode (as bge, e5, all-mpnet, gte-Qwen2 have it)."""
    keys = {"cls": "pooling_mode_cls_token", "mean": "pooling_mode_mean_tokens", "max": "pooling_mode_max_tokens",
            "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
            "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}
    return {"word_embedding_dimension": dimension, **{key: name == mode for name, key in keys.items()}, **extra}


@dataclass(frozen=True)
class Family:
    """One family's hub layout: its base model kind and the sentence-transformers files beside the weights."""

    name: str
    base: str  # "bert" (a BertModel, MiniLM's vocabulary) or "qwen3" (a Qwen3Model, left padding)
    pooling: dict[str, Any]
    normalize: bool = True
    legacy: bool = True  # sentence_transformers.models.X types (the older hub repositories)
    dense: tuple[dict[str, Any], ...] = ()  # (folder, config) of each Dense module
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    sbert_config: dict[str, Any] = field(default_factory=lambda: {"max_seq_length": 128, "do_lower_case": False})
    padding_side: str | None = None


FAMILIES = {
    # BAAI/bge-*-en-v1.5: CLS pooling, Normalize, a query instruction, lower-cased input
    "bge": Family("bge", "bert", legacy_pooling(32, "cls"), prompts={"query": BGE_QUERY},
                  sbert_config={"max_seq_length": 64, "do_lower_case": True}),
    # a max-pooled model in the current file form
    "max": Family("max", "bert", {"embedding_dimension": 32, "pooling_mode": "max", "include_prompt": True},
                  legacy=False),
    # sentence-transformers/LaBSE: CLS, a Dense projection with tanh, Normalize
    "labse": Family("labse", "bert", legacy_pooling(32, "cls"), dense=(
        {"path": "2_Dense", "config": {"in_features": 32, "out_features": 16, "bias": True,
                                       "activation_function": "torch.nn.modules.activation.Tanh"}},)),
    # dunzhang/stella_en_400M_v5: mean, a Dense of its own folder name with an identity activation, no Normalize
    "stella": Family("stella", "bert", legacy_pooling(32, "mean"), normalize=False, dense=(
        {"path": "2_Dense_24", "config": {"in_features": 32, "out_features": 24, "bias": True,
                                          "activation_function": "torch.nn.modules.linear.Identity"}},),
        prompts={"s2p_query": "Instruct: Given a web search query, retrieve relevant passages.\nQuery: "}),
    # Qwen/Qwen3-Embedding-*: a decoder, last-token pooling, left padding, an instruction for queries
    "qwen3": Family("qwen3", "qwen3", legacy_pooling(64, "lasttoken", include_prompt=True),
                    prompts={"query": QWEN_QUERY, "document": ""}, padding_side="left",
                    sbert_config={"max_seq_length": 256, "do_lower_case": False}),
    # intfloat/e5-*: mean, Normalize, "passage: " on every input unless another prompt is named
    "e5": Family("e5", "bert", legacy_pooling(32, "mean"), prompts={"query": "query: ", "passage": "passage: "},
                 default_prompt_name="passage"),
    # sentence-transformers/all-mpnet-base-v2's shape: mean and Normalize (served right before)
    "mpnet": Family("mpnet", "bert", legacy_pooling(32, "mean")),
    # an INSTRUCTOR-style model: the instruction is read but not pooled
    "instructor": Family("instructor", "bert", {"embedding_dimension": 32, "pooling_mode": "mean",
                                                "include_prompt": False}, legacy=False,
                         prompts={"query": "Represent the question for retrieval: "}, default_prompt_name="query"),
    # SGPT-style position-weighted mean, and the sqrt-length mean, current form
    "weightedmean": Family("weightedmean", "bert", {"embedding_dimension": 32, "pooling_mode": "weightedmean"},
                           legacy=False),
    "sqrtlen": Family("sqrtlen", "bert", {"embedding_dimension": 32, "pooling_mode": "mean_sqrt_len_tokens"},
                      legacy=False, normalize=False),
}


def build(family: Family, dest: Path) -> Path:
    """The family's directory in dest: random weights and its files as the hub has them."""
    dest = Path(dest)
    if (dest / "modules.json").is_file():
        return dest
    if family.base == "qwen3":
        build_tiny_qwen3(dest)
    else:
        model_factory.build_feature_extractor(dest)
    modules = [("Transformer", "")]
    _write(dest / "1_Pooling" / "config.json", family.pooling)
    modules.append(("Pooling", "1_Pooling"))
    for index, dense in enumerate(family.dense):
        _write(dest / dense["path"] / "config.json", dense["config"])
        _dense_weights(dest / dense["path"], dense["config"], seed=index + 1)
        modules.append(("Dense", dense["path"]))
    if family.normalize:
        modules.append(("Normalize", f"{len(modules)}_Normalize"))
    _write(dest / "modules.json", [
        {"idx": i, "name": str(i), "path": path, "type": (LEGACY + kind) if family.legacy else CURRENT[kind]}
        for i, (kind, path) in enumerate(modules)])
    _write(dest / "sentence_bert_config.json", family.sbert_config)
    _write(dest / "config_sentence_transformers.json", {
        "__version__": {"sentence_transformers": "3.4.1" if family.legacy else "6.2.0", "transformers": "5.23.0",
                        "pytorch": "2.13.0"},
        "model_type": "SentenceTransformer", "prompts": family.prompts,
        "default_prompt_name": family.default_prompt_name, "similarity_fn_name": "cosine"})
    if family.padding_side is not None:
        config_path = dest / "tokenizer_config.json"
        config = json.loads(config_path.read_text())
        config["padding_side"] = family.padding_side
        _write(config_path, config)
    return dest


def build_tiny_qwen3(dest: Path) -> Path:
    """A tiny random Qwen3Model (the embedding models' base: no LM head) with GPT-2's tokenizer from model_factory."""
    import torch
    from transformers import AutoTokenizer, Qwen3Config, Qwen3Model

    gpt2 = model_factory.build_tiny_gpt2(dest.parent / f"{dest.name}-tokenizer", positions=512)
    tokenizer = AutoTokenizer.from_pretrained(str(gpt2))
    eos = tokenizer.eos_token_id
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
                         bos_token_id=eos, eos_token_id=eos, pad_token_id=eos)
    torch.manual_seed(0)
    model = Qwen3Model(config).eval()
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.save_pretrained(str(dest))
    model.save_pretrained(str(dest))
    return dest


def build_unsupported(dest: Path) -> Path:
    """A directory whose modules.json names a module the server does not compute (an LSTM after the pooling)."""
    build(FAMILIES["mpnet"], dest)
    modules = json.loads((dest / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_LSTM", "type": LEGACY + "LSTM"})
    _write(dest / "modules.json", modules)
    return dest


def _dense_weights(folder: Path, config: dict[str, Any], seed: int) -> None:
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    weights = {"linear.weight": torch.randn(config["out_features"], config["in_features"], generator=generator) * 0.3}
    if config.get("bias", True):
        weights["linear.bias"] = torch.randn(config["out_features"], generator=generator) * 0.1
    save_file(weights, str(folder / "model.safetensors"))


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2))
