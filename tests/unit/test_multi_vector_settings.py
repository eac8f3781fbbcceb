"""A ColBERT-style model's files, as core.model_layout reads them and core.multi_vector_settings translates them
(sentence-transformers 6.2's MultiVectorEncoder rules), from file texts alone."""

from __future__ import annotations

import json
import string
from typing import Any

import pytest

from models_registry.core import multi_vector_settings
from models_registry.core.model_layout import ModelLayout, UnsupportedLayout, parse_layout
from models_registry.core.multi_vector_settings import Expansion, UnsupportedMultiVector

MVE = "sentence_transformers.base.modules."
MASK = "sentence_transformers.multi_vector_encoder.modules.multi_vector_mask.MultiVectorMask"
PYLATE_DENSE = "pylate.models.Dense.Dense"
DENSE_CONFIG = {"in_features": 8, "out_features": 4, "bias": False,
                "activation_function": "torch.nn.modules.linear.Identity"}


def reader(files: dict[str, Any]):
    return lambda path: json.dumps(files[path]) if path in files else None


def native(transformer: dict[str, Any] | None = None, mask: dict[str, Any] | None = None,
           config: dict[str, Any] | None = None, dense: dict[str, Any] | None = None) -> dict[str, Any]:
    """A MultiVectorEncoder save's files (sentence-transformers 6.2 writes these)."""
    modules = [(MVE + "transformer.Transformer", ""), (MVE + "dense.Dense", "1_Dense"), (MASK, "2_MultiVectorMask"),
               (MVE + "normalize.Normalize", "3_Normalize")]
    return {
        "modules.json": [{"idx": i, "name": str(i), "path": p, "type": t} for i, (t, p) in enumerate(modules)],
        "1_Dense/config.json": dense or {**DENSE_CONFIG, "module_input_name": "token_embeddings"},
        "2_MultiVectorMask/config.json": mask if mask is not None else {"skiplist_words": ["!", "."]},
        "3_Normalize/config.json": {"module_input_name": "token_embeddings", "module_output_name": "token_embeddings"},
        "sentence_bert_config.json": transformer if transformer is not None else {
            "document_length": 40, "query_expansion": {"strategy": "fixed", "attend": False, "token": None,
                                                       "length": 16}},
        "config_sentence_transformers.json": {"model_type": "MultiVectorEncoder",
                                              "prompts": {"query": "[Q] ", "document": "[D] "}, **(config or {})},
    }


def pylate(config: dict[str, Any], model_type: str | None = None) -> dict[str, Any]:
    """A PyLate save: Transformer and PyLate's Dense, its knobs at the top of config_sentence_transformers.json."""
    return {
        "modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                         {"idx": 1, "name": "1", "path": "1_Dense", "type": PYLATE_DENSE}],
        "1_Dense/config.json": DENSE_CONFIG,
        "sentence_bert_config.json": {"max_seq_length": 179, "do_lower_case": False},
        "config_sentence_transformers.json": {"prompts": {}, "default_prompt_name": None, **config,
                                              **({"model_type": model_type} if model_type else {})},
    }


def settings(files: dict[str, Any]) -> multi_vector_settings.MultiVectorSettings:
    layout = parse_layout(reader(files))
    return multi_vector_settings.read(layout.kind, layout.multi_vector or {})


def test_a_native_save_is_token_vectors_with_its_own_knobs() -> None:
    layout = parse_layout(reader(native()))
    assert layout.modules == ("Transformer", "Dense", "MultiVectorMask", "Normalize")
    assert (layout.pooling_name, layout.normalize, layout.dense[0].out_features) == ("none", True, 4)
    assert layout.prompts == {"query": "[Q] ", "document": "[D] "}
    assert ModelLayout.from_json(json.loads(json.dumps(layout.to_json()))) == layout
    read = multi_vector_settings.read(layout.kind, layout.multi_vector or {})
    assert read == multi_vector_settings.MultiVectorSettings(
        document_length=40, expansion=Expansion("fixed", 16), skiplist_words=("!", "."))
    assert read.summary() == ("maxsim; queries fixed-expanded to 16 tokens (not attended); document length 40; "
                              "2 skiplist tokens left out of documents")


def test_the_mask_module_decides_the_skiplist_and_whether_expansions_are_scored() -> None:
    assert settings(native(mask={"skiplist_words": ["?"], "skiplist_tasks": "query",
                                 "keep_only_token_ids": [7]})).skiplist_tasks == ("query",)
    files = native()
    files["modules.json"] = [m for m in files["modules.json"] if m["type"] != MASK]
    assert (settings(files).masked, settings(files).skiplist_words) == (False, ())


def test_an_old_pylate_save_is_translated_as_sentence_transformers_translates_it() -> None:
    files = pylate({"similarity_fn_name": "MaxSim", "query_prefix": "[Q] ", "document_prefix": "[D] ",
                    "query_length": 32, "document_length": 180, "attend_to_expansion_tokens": False})
    layout = parse_layout(reader(files))
    # sentence-transformers appends the mask and a token-level Normalize to PyLate's two modules
    assert layout.modules == ("Transformer", "Dense", "MultiVectorMask", "Normalize") and layout.normalize is True
    assert layout.prompts == {"query": "[Q] ", "document": "[D] "} and layout.max_seq_length == 179
    read = multi_vector_settings.read(layout.kind, layout.multi_vector or {})
    # PyLate's query length is the width its queries are padded to with [MASK]; punctuation is skipped
    assert read.expansion == Expansion("fixed", 32) and read.query_length is None and read.document_length == 180
    assert read.skiplist_words == tuple(string.punctuation) and read.prefixes == ("[Q] ", "[D] ")
    assert read.similarity == "maxsim"


def test_pylate_without_expansion_keeps_its_query_length_as_a_cap() -> None:
    read = settings(pylate({"query_prefix": "", "query_length": 24, "do_query_expansion": False,
                            "skiplist_words": []}))
    assert (read.expansion, read.query_length, read.skiplist_words, read.prefixes) == (None, 24, (), ())


def test_pylate_3_skips_punctuation_even_without_prefixes_and_attends_when_told() -> None:
    read = settings(pylate({"attend_to_expansion_tokens": True, "query_length": 12}, model_type="ColBERT"))
    assert read.expansion == Expansion("fixed", 12, attend=True) and read.skiplist_words == tuple(string.punctuation)


def test_a_saved_prompt_follows_pylates_prefix_once() -> None:
    files = pylate({"query_prefix": "[Q] ", "document_prefix": "[D] "})
    files["config_sentence_transformers.json"]["prompts"] = {"query": "[Q] find: ", "document": "doc: "}
    assert parse_layout(reader(files)).prompts == {"query": "[Q] find: ", "document": "[D] doc: "}


def test_meanmaxsim_and_a_min_expansion_with_a_query_cap() -> None:
    read = settings(native(
        transformer={"query_length": 24, "query_expansion": {"strategy": "min", "attend": True, "length": 12}},
        config={"similarity_fn_name": "meanmaxsim"}))
    assert (read.expansion, read.query_length, read.similarity) == (Expansion("min", 12, True), 24, "meanmaxsim")


@pytest.mark.parametrize("transformer, words", [
    ({"processing_kwargs": {"text": {"max_length": 8}}}, "processing_kwargs"),
    ({"modality_config": {"message": {"method": "forward", "method_output_name": "last_hidden_state"}}},
     "only a text model"),
    ({"query_expansion": {"strategy": "grow", "length": 8}}, "grow"),
    ({"query_expansion": {"strategy": "fixed"}}, "positive integer"),
    ({"query_expansion": {"strategy": "fixed", "length": 8, "colour": "red"}}, "keys strategy"),
    ({"query_length": 8, "query_expansion": {"strategy": "fixed", "length": 16}}, "below query_expansion"),
    ({"document_length": "long"}, "document_length"),
])
def test_what_is_not_computed_is_refused_by_name(transformer: dict[str, Any], words: str) -> None:
    with pytest.raises(UnsupportedMultiVector, match=words):
        settings(native(transformer=transformer))


def test_a_sentence_level_dense_in_a_multi_vector_model_is_refused() -> None:
    with pytest.raises(UnsupportedLayout, match="only over token_embeddings"):
        parse_layout(reader(native(dense={**DENSE_CONFIG, "module_input_name": "sentence_embedding"})))


def test_a_token_pooling_module_is_not_computed() -> None:
    files = native()
    files["modules.json"].append({"idx": 4, "name": "4", "path": "4_Pool", "type": (
        "sentence_transformers.multi_vector_encoder.modules.token_pooling.HierarchicalTokenPooling")})
    with pytest.raises(UnsupportedLayout, match="HierarchicalTokenPooling"):
        parse_layout(reader(files))
