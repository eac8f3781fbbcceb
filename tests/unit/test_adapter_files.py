"""core.adapter_files: a PEFT adapter's files read from their headers and checked against a base's layers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from models_registry.core import adapter_files
from models_registry.core.adapter_files import AdapterProblem

PREFIX = "base_model.model."
BASE = {"encoder.layer.0.attention.self.query.weight": (32, 32), "encoder.layer.0.attention.self.value.weight": (32, 32),
        "encoder.layer.0.intermediate.dense.weight": (64, 32), "embeddings.word_embeddings.weight": (100, 32),
        "embeddings.LayerNorm.weight": (32,)}


def lora(path: str, r: int, in_features: int, out_features: int) -> dict[str, np.ndarray]:
    return {f"{PREFIX}{path}.lora_A.weight": np.zeros((r, in_features), np.float32),
            f"{PREFIX}{path}.lora_B.weight": np.zeros((out_features, r), np.float32)}


def write(folder: Path, config: dict[str, object], tensors: dict[str, np.ndarray]) -> tuple[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / adapter_files.CONFIG_FILE).write_text(json.dumps({"peft_type": "LORA", **config}))
    save_file(tensors, str(folder / adapter_files.WEIGHTS_FILE))
    return str(folder / adapter_files.CONFIG_FILE), str(folder / adapter_files.WEIGHTS_FILE)


def test_the_manifest_reads_ranks_shapes_and_scalings(tmp_path: Path) -> None:
    tensors = {**lora("encoder.layer.0.attention.self.query", 4, 32, 32),
               **lora("encoder.layer.0.attention.self.value", 8, 32, 32)}
    manifest = adapter_files.read_manifest(*write(tmp_path, {"r": 4, "lora_alpha": 16, "rank_pattern": {"value": 8},
                                                             "alpha_pattern": {"value": 4}}, tensors))
    query = manifest.layers["encoder.layer.0.attention.self.query"]
    value = manifest.layers["encoder.layer.0.attention.self.value"]
    assert (query.rank, query.in_features, query.out_features, query.scaling) == (4, 32, 32, 4.0)
    assert (value.rank, value.scaling) == (8, 0.5)  # its own alpha over its own rank
    adapter_files.check_against_base(manifest, BASE)


def test_rslora_scales_by_the_square_root_of_the_rank() -> None:
    assert adapter_files.scaling_of({"lora_alpha": 8, "use_rslora": True}, "x.query", 4) == 8 / math.sqrt(4)
    assert adapter_files.scaling_of({"lora_alpha": 8}, "x.query", 4) == 2.0


def test_a_target_the_base_lacks_or_a_shape_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    missing = adapter_files.read_manifest(*write(tmp_path / "a", {"r": 4},
                                                 lora("encoder.layer.0.attention.self.key", 4, 32, 32)))
    with pytest.raises(AdapterProblem, match="'encoder.layer.0.attention.self.key' is not a Linear layer"):
        adapter_files.check_against_base(missing, BASE)
    wrong = adapter_files.read_manifest(*write(tmp_path / "b", {"r": 4},
                                               lora("encoder.layer.0.intermediate.dense", 4, 48, 64)))
    with pytest.raises(AdapterProblem, match=r"A must be r x 32 and B 64 x r"):
        adapter_files.check_against_base(wrong, BASE)


def test_paths_resolve_across_the_base_class_prefix() -> None:
    classifier = {f"bert.{name}": shape for name, shape in BASE.items()}
    assert adapter_files.resolve_path("encoder.layer.0.attention.self.query", [n[:-7] for n in classifier]) == \
        "bert.encoder.layer.0.attention.self.query"
    assert adapter_files.resolve_path("bert.encoder.x", ["encoder.x"], prefix="bert") == "encoder.x"
    assert adapter_files.resolve_path("encoder.x", ["bert.encoder.x"], prefix="bert") == "bert.encoder.x"


@pytest.mark.parametrize("config, message", [({"use_dora": True}, "DoRA"), ({"peft_type": "IA3"}, "IA3"),
                                             ({"bias": "all"}, "biases")])
def test_variants_this_server_does_not_compute_are_refused(tmp_path: Path, config: dict[str, object],
                                                           message: str) -> None:
    with pytest.raises(AdapterProblem, match=message):
        adapter_files.read_manifest(*write(tmp_path, config, lora("encoder.layer.0.attention.self.query", 4, 32, 32)))


def test_modules_to_save_must_be_linear_and_fit(tmp_path: Path) -> None:
    head = {f"{PREFIX}classifier.weight": np.zeros((2, 32), np.float32), f"{PREFIX}classifier.bias": np.zeros(2, np.float32)}
    manifest = adapter_files.read_manifest(*write(tmp_path / "a", {"r": 4}, {
        **lora("encoder.layer.0.attention.self.query", 4, 32, 32), **head}))
    assert manifest.saved["classifier"].bias
    with pytest.raises(AdapterProblem, match="modules_to_save: 'classifier' is not a Linear layer"):
        adapter_files.check_against_base(manifest, BASE)
    adapter_files.check_against_base(manifest, {**BASE, "classifier.weight": (2, 32), "classifier.bias": (2,)})
    norm = {f"{PREFIX}encoder.LayerNorm.weight": np.zeros(32, np.float32)}
    with pytest.raises(AdapterProblem, match="only Linear modules"):
        adapter_files.read_manifest(*write(tmp_path / "b", {"r": 4}, norm))


def test_missing_files_say_what_an_adapter_directory_holds() -> None:
    with pytest.raises(AdapterProblem, match="adapter_config.json and adapter_model.safetensors"):
        adapter_files.read_manifest(None, None, where="/tmp/nowhere")


def test_gpt2s_conv1d_weights_are_in_x_out_where_the_adapter_says_fan_in_fan_out(tmp_path: Path) -> None:
    """GPT-2 stores c_attn's weight as in x out (Conv1D); peft saves such an adapter with fan_in_fan_out."""
    base = {"transformer.h.0.attn.c_attn.weight": (32, 96)}
    tensors = lora("transformer.h.0.attn.c_attn", 4, 32, 96)
    flagged = adapter_files.read_manifest(*write(tmp_path / "a", {"r": 4, "fan_in_fan_out": True}, tensors))
    adapter_files.check_against_base(flagged, base)
    plain = adapter_files.read_manifest(*write(tmp_path / "b", {"r": 4}, tensors))
    with pytest.raises(AdapterProblem, match="A must be r x 96 and B 32 x r"):
        adapter_files.check_against_base(plain, base)
