"""A PEFT LoRA adapter's files (adapter_config.json, adapter_model.safetensors) read and checked against its base.

Read with json and safetensors' headers only (no peft, no torch): the registration checks an adapter
before any worker loads it, and the worker reads the same manifest before it loads the tensors. The
format is peft's (src/peft/tuners/lora/layer.py, utils/save_and_load.py): keys
`base_model.model.<module path>.lora_A.weight` (r x in_features) and `.lora_B.weight` (out_features x r),
the adapter's own copies of `modules_to_save` as `base_model.model.<module path>.weight` / `.bias`, and a
scaling of lora_alpha / r (lora_alpha / sqrt(r) with use_rslora), per module where rank_pattern or
alpha_pattern name it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
KEY_PREFIX = "base_model.model."
LORA_A, LORA_B = ".lora_A.weight", ".lora_B.weight"
# What a base checkpoint's weights may be stored in (a sharded one names its files in the index).
BASE_WEIGHTS = "model.safetensors"
BASE_INDEX = "model.safetensors.index.json"
# LoRA variants whose product is not B @ A x (or that train more than the product): refused with their name.
_VARIANTS = {"use_dora": "DoRA", "use_qalora": "QALoRA", "use_bdlora": "BD-LoRA"}


class AdapterProblem(ValueError):
    """The adapter's files cannot be served on its base; the message says what to change."""


@dataclass(frozen=True)
class LoraLayer:
    """One target module's low-rank update: its path in the base model, A's and B's shapes, its scaling."""

    path: str
    rank: int
    in_features: int
    out_features: int
    scaling: float


@dataclass(frozen=True)
class SavedModule:
    """A module the adapter replaces whole (peft's modules_to_save): its path and its weight's shape."""

    path: str
    out_features: int
    in_features: int
    bias: bool


@dataclass(frozen=True)
class AdapterManifest:
    """What an adapter's files say: its LoRA layers and whole-module copies, by module path (peft's keys)."""

    layers: dict[str, LoraLayer]
    saved: dict[str, SavedModule] = field(default_factory=dict)
    base_model: str = ""  # adapter_config's base_model_name_or_path (informative only)
    fan_in_fan_out: bool = False  # the targets store their weight in x out (GPT-2's Conv1D), as peft's flag says

    @property
    def paths(self) -> list[str]:
        """Every module path the adapter touches."""
        return sorted({*self.layers, *self.saved})


def pattern_key(patterns: Iterable[str], path: str) -> str | None:
    """The rank_pattern / alpha_pattern key that names path, as peft's get_pattern_key matches it."""
    for key in patterns:
        if re.match(rf"(.*\.)?({key})$", path):
            return key
    return None


def scaling_of(config: Mapping[str, object], path: str, rank: int) -> float:
    """lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora (the module's own alpha where alpha_pattern names it)."""
    alphas = config.get("alpha_pattern") or {}
    if not isinstance(alphas, dict):
        raise AdapterProblem(f"alpha_pattern must be an object of module patterns, not {alphas!r}")
    key = pattern_key(alphas, path)
    alpha = alphas[key] if key is not None else config.get("lora_alpha", 8)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or alpha <= 0:
        raise AdapterProblem(f"lora_alpha of {path!r} must be a positive number, not {alpha!r}")
    alpha = float(alpha)
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def check_config(config: Mapping[str, object]) -> None:
    """Refuse what this server does not compute: other PEFT methods, LoRA variants, trained biases."""
    kind = str(config.get("peft_type") or "LORA").upper()
    if kind != "LORA":
        raise AdapterProblem(f"peft_type {kind} is not served; only LoRA adapters are (peft_type LORA)")
    for flag, name in _VARIANTS.items():
        if config.get(flag):
            raise AdapterProblem(f"{name} adapters ({flag}) are not served; train a plain LoRA adapter")
    if str(config.get("bias") or "none") != "none" or config.get("lora_bias"):
        raise AdapterProblem("adapters that train biases (bias other than 'none', lora_bias) are not served")
    if config.get("layer_replication") or config.get("trainable_token_indices") or config.get("target_parameters"):
        raise AdapterProblem("adapters with layer_replication, trainable_token_indices or target_parameters are "
                             "not served")


def manifest_of(config: Mapping[str, object], shapes: Mapping[str, tuple[int, ...]]) -> AdapterManifest:
    """The manifest of an adapter config and its tensors' shapes (keys as peft saves them)."""
    check_config(config)
    stray = [k for k in shapes if not k.startswith(KEY_PREFIX)]
    if stray:
        raise AdapterProblem(f"{WEIGHTS_FILE} holds keys peft does not save, such as {stray[0]!r}")
    a_shapes = {k[len(KEY_PREFIX):-len(LORA_A)]: s for k, s in shapes.items() if k.endswith(LORA_A)}
    b_shapes = {k[len(KEY_PREFIX):-len(LORA_B)]: s for k, s in shapes.items() if k.endswith(LORA_B)}
    if set(a_shapes) != set(b_shapes):
        odd = sorted(set(a_shapes) ^ set(b_shapes))[0]
        raise AdapterProblem(f"module {odd!r} has only one of lora_A and lora_B")
    layers: dict[str, LoraLayer] = {}
    for path, a in a_shapes.items():
        b = b_shapes[path]
        if len(a) != 2 or len(b) != 2 or a[0] != b[1]:
            raise AdapterProblem(f"module {path!r}: lora_A {list(a)} and lora_B {list(b)} are not r x in and out x r")
        layers[path] = LoraLayer(path, a[0], a[1], b[0], scaling_of(config, path, a[0]))
    saved = _saved_modules({k: s for k, s in shapes.items() if ".lora_" not in k})
    if not layers and not saved:
        raise AdapterProblem(f"{WEIGHTS_FILE} holds no LoRA weights (keys ending {LORA_A!r})")
    return AdapterManifest(layers, saved, str(config.get("base_model_name_or_path") or ""),
                           bool(config.get("fan_in_fan_out")))


def _saved_modules(shapes: Mapping[str, tuple[int, ...]]) -> dict[str, SavedModule]:
    """The whole modules an adapter replaces: Linear ones only (a weight of out x in, an optional bias)."""
    weights = {k[len(KEY_PREFIX):-len(".weight")]: s for k, s in shapes.items() if k.endswith(".weight")}
    biases = {k[len(KEY_PREFIX):-len(".bias")] for k in shapes if k.endswith(".bias")}
    other = [k for k in shapes if not k.endswith((".weight", ".bias"))]
    if other or biases - set(weights):
        raise AdapterProblem(f"modules_to_save: only Linear modules are served, not {(other or sorted(biases))[0]!r}")
    saved: dict[str, SavedModule] = {}
    for path, shape in weights.items():
        if len(shape) != 2:
            raise AdapterProblem(f"modules_to_save: {path!r} is not a Linear module (weight {list(shape)}); "
                                 "only Linear modules are served")
        saved[path] = SavedModule(path, shape[0], shape[1], path in biases)
    return saved


def read_manifest(config_path: str | None, weights_path: str | None, where: str = "") -> AdapterManifest:
    """The manifest of an adapter's two files (its tensors' headers only are read); None: the file is missing."""
    if config_path is None or weights_path is None:
        raise AdapterProblem(f"{where or 'the adapter'}: a PEFT adapter needs {CONFIG_FILE} and {WEIGHTS_FILE} (save "
                             "it with peft's save_pretrained, safe_serialization on)")
    return manifest_of(read_config(config_path), tensor_shapes(weights_path))


def read_config(path: str) -> dict[str, object]:
    """adapter_config.json as a dict."""
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as error:
        raise AdapterProblem(f"{CONFIG_FILE} is unreadable: {error}") from None
    if not isinstance(config, dict):
        raise AdapterProblem(f"{CONFIG_FILE} is not a JSON object")
    return config


def tensor_shapes(path: str) -> dict[str, tuple[int, ...]]:
    """Every tensor's shape in a safetensors file, from its header alone."""
    from safetensors import safe_open

    try:
        with safe_open(path, framework="numpy") as handle:
            return {key: tuple(handle.get_slice(key).get_shape()) for key in handle.keys()}
    except Exception as error:  # a truncated or foreign file: safetensors' own error types vary by version
        raise AdapterProblem(f"{path}: not a readable safetensors file ({type(error).__name__}: {error})") from None


def shard_names(index_path: str) -> list[str]:
    """The weight files a sharded checkpoint's index names."""
    with open(index_path, encoding="utf-8") as handle:
        return sorted(set((json.load(handle).get("weight_map") or {}).values()))


def resolve_path(path: str, modules: Iterable[str], prefix: str = "") -> str | None:
    """The base module an adapter's path names: itself, or across the base class's prefix (bert.encoder...).

    An adapter trained on BertModel names `encoder.layer.0...`; the same layers of a
    BertForSequenceClassification are `bert.encoder.layer.0...`, and the other way round.
    """
    names = set(modules)
    if path in names:
        return path
    head, _, rest = path.partition(".")
    candidates = [f"{prefix}.{path}"] if prefix else [name for name in names if name.endswith("." + path)
                                                      and name.count(".") == path.count(".") + 1]
    candidates += [rest] if rest and (not prefix or head == prefix) else []
    found = [c for c in candidates if c in names]
    return found[0] if len(found) == 1 else None


def check_against_base(manifest: AdapterManifest, shapes: Mapping[str, tuple[int, ...]], prefix: str = "") -> None:
    """Refuse an adapter whose target modules the base lacks, or whose A/B shapes do not fit the base's layers.

    shapes: the base's parameter shapes by name (`<module path>.weight`: out x in for a Linear, in x out for
    GPT-2's Conv1D, whose adapters peft saves with fan_in_fan_out).
    """
    linears = {name[:-len(".weight")]: shape for name, shape in shapes.items()
               if name.endswith(".weight") and len(shape) == 2}
    for layer in manifest.layers.values():
        found = resolve_path(layer.path, linears, prefix)
        if found is None:
            raise AdapterProblem(f"target module {layer.path!r} is not a Linear layer of the base model")
        out_features, in_features = linears[found][::-1] if manifest.fan_in_fan_out else linears[found]
        if (layer.in_features, layer.out_features) != (in_features, out_features):
            raise AdapterProblem(
                f"module {layer.path!r}: lora_A is {layer.rank} x {layer.in_features} and lora_B "
                f"{layer.out_features} x {layer.rank}, but the base layer is {out_features} x {in_features} "
                f"(out x in): A must be r x {in_features} and B {out_features} x r; was it trained on another model?")
    for module in manifest.saved.values():
        found = resolve_path(module.path, linears, prefix)
        if found is None:
            raise AdapterProblem(f"modules_to_save: {module.path!r} is not a Linear layer of the base model")
        if linears[found] != (module.out_features, module.in_features):
            raise AdapterProblem(f"modules_to_save: {module.path!r} is {module.out_features} x {module.in_features}, "
                                 f"the base's is {linears[found][0]} x {linears[found][1]}")
