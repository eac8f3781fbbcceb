"""What a model directory's own files say: sentence-transformers' module list, pooling, prompts, padding side.

Read (core.model_files) at registration (the defaults of the registration, shown in the admin and
`GET /models/<name>`) and at every load (what the worker computes). The files are sentence-transformers' (`modules.json`, `1_Pooling/config.json` in its legacy boolean and
current forms, `2_Dense/config.json`, `Normalize`, `config_sentence_transformers.json`,
`sentence_bert_config.json`) and the tokenizer's `tokenizer_config.json`. A directory without them says
nothing, and today's defaults apply. A module we do not compute is refused with a message that names it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from models_registry.core.chat_template_formats import reasoning_format_of, tool_call_format_of

# Pooling modes as sentence-transformers names them, in its concatenation order.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
LEGACY_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
SPARSE_ACTIVATIONS = ("relu", "log1p_relu")
SPARSE_POOLINGS = ("max", "sum")
# The modules.json types we compute, by class name (old `sentence_transformers.models.X` paths included).
TRANSFORMERS = ("Transformer", "MLMTransformer")
COMPUTED = (*TRANSFORMERS, "Pooling", "Dense", "Normalize", "SpladePooling", "LogitScore", "MultiVectorMask")
FOREIGN_TYPES = {"pylate.models.Dense.Dense": "Dense"}  # PyLate's projection: sentence-transformers' own Dense
TRANSFORMER_CONFIG_FILES = ("sentence_bert_config.json", "sentence_roberta_config.json",
                            "sentence_distilbert_config.json", "sentence_camembert_config.json",
                            "sentence_albert_config.json", "sentence_xlm-roberta_config.json",
                            "sentence_xlnet_config.json")

FileReader = Callable[[str], "str | None"]


class UnsupportedLayout(ValueError):
    """The directory asks for a computation this server does not do (a module, a mode): refused, not guessed."""


@dataclass(frozen=True)
class DenseLayer:
    """One `Dense` module: a linear projection of the pooled vector, then its activation."""

    path: str
    in_features: int
    out_features: int
    bias: bool = True
    activation: str = "torch.nn.modules.activation.Tanh"  # a torch.nn module class, as its config names it
    residual: bool = False


@dataclass(frozen=True)
class ModelLayout:
    """What the files say; None (or empty) where they say nothing."""

    kind: str = ""  # SentenceTransformer, SparseEncoder, CrossEncoder, MultiVectorEncoder; "" without modules.json
    modules: tuple[str, ...] = ()  # the module list by class name, in order
    transformer_path: str = ""  # the Transformer module's folder (its config and, usually, the weights' root)
    transformer_task: str = ""  # sentence_bert_config's transformer_task (text-generation: a causal-LM reranker)
    pooling: tuple[str, ...] = ()
    include_prompt: bool = True
    dense: tuple[DenseLayer, ...] = ()
    normalize: bool | None = None  # a Normalize module; None where there is no module list
    max_seq_length: int | None = None
    do_lower_case: bool = False
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    padding_side: str | None = None
    splade: dict[str, str] | None = None  # SpladePooling: pooling_strategy, activation_function
    max_active_dims: int | None = None  # a SparseEncoder's bound on each vector's non-zero entries
    logit_tokens: tuple[int, int | None] | None = None  # LogitScore: the true and false token ids
    # The Transformer's modality_config: "message" renders a pair through the chat template ("text"
    # alone: tokenizer pairs, as a save from before modality_config). () without modules.json.
    modalities: tuple[str, ...] = ()
    message_format: str = ""  # "flat" or "structured" message content; "": inferred from the chat template
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)  # processing_kwargs' "chat_template"
    multi_vector: dict[str, Any] | None = None  # ColBERT-style: its knobs as the files say (core.multi_vector_settings)
    reasoning_format: str | None = None  # the chat template's `<think>` format (core.reasoning_text); None: none
    tool_call_format: str | None = None  # the format the chat template's tool calls take; None: it renders no tools

    @property
    def pooling_name(self) -> str | None:
        """The pooling as one registration value ("cls", "mean+max" for a concatenation), None if unsaid."""
        return "+".join(self.pooling) if self.pooling else None

    def said(self) -> dict[str, Any]:
        """The settings the files gave, for the admin and `GET /models/<name>` (what the files leave unsaid is absent)."""
        said: dict[str, Any] = {}
        if self.kind:
            said["kind"] = self.kind
            said["modules"] = list(self.modules)
        if self.pooling:
            said["pooling"] = self.pooling_name
            if not self.include_prompt:
                said["include_prompt"] = False
        if self.dense:
            said["dense"] = [f"{d.in_features}->{d.out_features} {d.activation.rsplit('.', 1)[-1]}" for d in self.dense]
        if self.normalize is not None:
            said["normalize"] = self.normalize
        if self.max_seq_length is not None:
            said["max_seq_length"] = self.max_seq_length
        if self.do_lower_case:
            said["do_lower_case"] = True
        if self.prompts:
            said["prompts"] = dict(self.prompts)
        if self.default_prompt_name is not None:
            said["default_prompt_name"] = self.default_prompt_name
        if self.padding_side is not None:
            said["padding_side"] = self.padding_side
        if self.splade is not None:
            said["sparse"] = dict(self.splade)
        if self.max_active_dims is not None:
            said["max_active_dims"] = self.max_active_dims
        if self.logit_tokens is not None:
            said["logit_tokens"] = list(self.logit_tokens)
        if self.reasoning_format is not None:
            said["reasoning_format"] = self.reasoning_format
        if self.tool_call_format is not None:
            said["tool_call_format"] = self.tool_call_format
        return said

    def to_json(self) -> dict[str, Any]:
        """A JSON-able copy (stored with the registration)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> ModelLayout:
        """The layout to_json wrote; an empty layout for None or {} (a registration from before the files were read)."""
        if not data:
            return cls()
        data = dict(data)
        data["modules"] = tuple(data.get("modules") or ())
        data["pooling"] = tuple(data.get("pooling") or ())
        data["dense"] = tuple(DenseLayer(**d) for d in data.get("dense") or ())
        data["modalities"] = tuple(data.get("modalities") or ())
        if data.get("logit_tokens") is not None:
            data["logit_tokens"] = tuple(data["logit_tokens"])
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def parse_layout(read: FileReader) -> ModelLayout:
    """The layout from a reader of the directory's files (path -> text, None when absent); raises UnsupportedLayout."""
    tokenizer_config = _json(read, "tokenizer_config.json")
    padding_side = tokenizer_config.get("padding_side")
    padding_side = padding_side if padding_side in ("left", "right") else None
    template = _chat_template(read, tokenizer_config)
    # with tools, transformers renders a "tool_use" template where there is one (Hermes 2 Pro's way)
    tools_template = _chat_template(read, tokenizer_config, "tool_use") or template
    reasoning_format, tool_call_format = reasoning_format_of(template), tool_call_format_of(tools_template)
    modules_text = read("modules.json")
    if modules_text is None:
        return ModelLayout(padding_side=padding_side, reasoning_format=reasoning_format,
                           tool_call_format=tool_call_format)
    modules = _loads(modules_text, "modules.json")
    if not isinstance(modules, list):
        raise UnsupportedLayout("modules.json is not a list of modules")
    st_config = _json(read, "config_sentence_transformers.json")
    values: dict[str, Any] = {"padding_side": padding_side, "reasoning_format": reasoning_format,
                              "tool_call_format": tool_call_format,
                              "kind": str(st_config.get("model_type") or "SentenceTransformer")}
    names: list[str] = []
    dense: list[DenseLayer] = []
    multi = values["kind"] in ("MultiVectorEncoder", "ColBERT") or any(m.get("type") in FOREIGN_TYPES for m in modules)
    for entry in sorted(modules, key=lambda m: int(m.get("idx", 0))):
        module_type = str(entry.get("type", ""))
        kind = FOREIGN_TYPES.get(module_type, module_type.rsplit(".", 1)[-1])
        path = str(entry.get("path", "")).strip("/")
        if not (module_type.startswith("sentence_transformers.") or module_type in FOREIGN_TYPES) or kind not in COMPUTED:
            raise UnsupportedLayout(
                f"modules.json names {module_type or 'a module without a type'!r}, which this server does not "
                f"compute; it computes {', '.join(COMPUTED)}")
        names.append(kind)
        config = _json(read, _join(path, "config.json"))
        if kind in TRANSFORMERS:
            values.update(_transformer(read, path))
            if kind == "MLMTransformer":
                values["transformer_task"] = "fill-mask"
        elif kind == "Pooling" and not multi:  # a multi-vector model's token vectors are not pooled
            values.update(_pooling(config))
        elif kind == "Dense":
            dense.append(_dense(config, path, "token_embeddings" if multi else "sentence_embedding"))
        elif kind == "Normalize":
            values["normalize"] = not multi or config.get("module_input_name") == "token_embeddings"
        elif kind == "MultiVectorMask":
            values["multi_vector"] = {"mask": config}
        elif kind == "SpladePooling":
            values["splade"] = _splade(config)
        elif kind == "LogitScore":
            values["logit_tokens"] = (int(config["true_token_id"]),
                                      None if config.get("false_token_id") is None else int(config["false_token_id"]))
    if not names or names[0] not in TRANSFORMERS:
        raise UnsupportedLayout("modules.json must start with a Transformer module, which this server computes")
    if "SpladePooling" in names:
        values["max_active_dims"] = _sparse(names, values.get("transformer_task", ""), st_config)
    values.setdefault("normalize", False)
    prompts = st_config.get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise UnsupportedLayout("config_sentence_transformers.json: 'prompts' must map names to strings")
    values["prompts"] = dict(prompts)
    default_name = st_config.get("default_prompt_name")
    if default_name is not None and default_name not in prompts:
        raise UnsupportedLayout(f"config_sentence_transformers.json: default_prompt_name {default_name!r} "
                                f"is not one of its prompts ({', '.join(sorted(prompts)) or 'none'})")
    values["default_prompt_name"] = default_name
    values = _multi_vector(read, st_config, names, values) if multi else values
    return ModelLayout(modules=tuple(names), dense=tuple(dense), **values)


def _chat_template(read: FileReader, tokenizer_config: dict[str, Any], name: str = "default") -> str | None:
    """The default chat template: chat_template.jinja (transformers' newer saves), else tokenizer_config.json's.

    Another name is looked up in tokenizer_config.json's named templates only (a hub cache may not know
    whether additional_chat_templates/ holds a file, and asking would fail a cached-only reader).
    """
    text = read("chat_template.jinja") if name == "default" else None
    if text is not None:
        return text
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):  # named templates: transformers' "default" one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get(name)
    elif name != "default":
        return None
    return template if isinstance(template, str) else None


def _multi_vector(read: FileReader, st_config: dict[str, Any], names: list[str], values: dict[str, Any]) -> dict:
    """A ColBERT-style model as sentence-transformers 6.2 loads it; PyLate's names gain the mask and Normalize it adds."""
    prompts, pylate = dict(values["prompts"]), values["kind"] != "MultiVectorEncoder"
    for key, role in (("query_prefix", "query"), ("document_prefix", "document")):
        if key in st_config:  # PyLate's prefixes go before the prompts, as sentence-transformers composes them
            prompts[role] = (st_config[key] or "") + (prompts.get(role) or "").removeprefix(st_config[key] or "")
    names += ["MultiVectorMask", "Normalize"] if pylate else []
    knobs = {"config": {k: v for k, v in st_config.items() if k not in ("__version__", "prompts")},
             "transformer": _json(read, _join(values.get("transformer_path", ""), "sentence_bert_config.json")),
             "mask": None if pylate else values.get("multi_vector", {}).get("mask")}
    return {**values, "pooling": ("none",), "prompts": prompts, "multi_vector": knobs,
            "normalize": pylate or values["normalize"]}


def _transformer(read: FileReader, path: str) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for name in TRANSFORMER_CONFIG_FILES:
        text = read(_join(path, name))
        if text is not None:
            config = _loads(text, _join(path, name))
            break
    values: dict[str, Any] = {"transformer_path": path, "do_lower_case": bool(config.get("do_lower_case", False))}
    if config.get("max_seq_length") is not None:
        values["max_seq_length"] = int(config["max_seq_length"])
    if config.get("transformer_task"):
        values["transformer_task"] = str(config["transformer_task"])
    # sentence-transformers reads a config without modality_config as text only (saved before it had one)
    modality = config.get("modality_config")
    values["modalities"] = tuple(modality) if isinstance(modality, dict) else ("text",)
    message = modality.get("message") if isinstance(modality, dict) else None
    if isinstance(message, dict) and message.get("format") in ("flat", "structured"):
        values["message_format"] = message["format"]
    template_kwargs = (config.get("processing_kwargs") or {}).get("chat_template")
    if isinstance(template_kwargs, dict):
        values["chat_template_kwargs"] = dict(template_kwargs)
    return values


def _pooling(config: dict[str, Any]) -> dict[str, Any]:
    mode = config.get("pooling_mode")
    if mode is None:
        modes = tuple(m for key, m in LEGACY_POOLING_KEYS.items() if config.get(key))
        modes = modes or ("mean",)
    else:
        modes = (mode,) if isinstance(mode, str) else tuple(mode)
    for name in modes:
        if name not in POOLING_MODES:
            raise UnsupportedLayout(f"1_Pooling: pooling mode {name!r} is not one of {', '.join(POOLING_MODES)}")
    return {"pooling": modes, "include_prompt": bool(config.get("include_prompt", True))}


def _dense(config: dict[str, Any], path: str, over: str = "sentence_embedding") -> DenseLayer:
    activation = str(config.get("activation_function") or "torch.nn.modules.activation.Tanh")
    if not activation.startswith("torch."):
        raise UnsupportedLayout(f"{path}: activation {activation!r} is not a torch.nn module; this server runs "
                                "no code from a model directory")
    if config.get("module_input_name", over) != over:
        raise UnsupportedLayout(f"{path}: a Dense over {config['module_input_name']!r} is not computed here "
                                f"(only over {over})")
    try:
        return DenseLayer(path=path, in_features=int(config["in_features"]), out_features=int(config["out_features"]),
                          bias=bool(config.get("bias", True)), activation=activation,
                          residual=bool(config.get("use_residual", False)))
    except KeyError as missing:
        raise UnsupportedLayout(f"{path}/config.json has no {missing}") from None


def _splade(config: dict[str, Any]) -> dict[str, str]:
    strategy = str(config.get("pooling_strategy", "max"))
    activation = str(config.get("activation_function", "relu"))
    if strategy not in SPARSE_POOLINGS or activation not in SPARSE_ACTIVATIONS:
        raise UnsupportedLayout(f"SpladePooling {strategy}/{activation} is not computed here "
                                f"(pooling {', '.join(SPARSE_POOLINGS)}; activation {', '.join(SPARSE_ACTIVATIONS)})")
    return {"pooling_strategy": strategy, "activation_function": activation}


def _sparse(names: list[str], transformer_task: str, st_config: dict[str, Any]) -> int | None:
    """A SPLADE model's max_active_dims; it must be an MLM transformer, then SpladePooling (what ST saves)."""
    if names[1:] != ["SpladePooling"] or transformer_task != "fill-mask":
        raise UnsupportedLayout(f"modules.json: {' -> '.join(names)} is not computed here; a sparse model is an "
                                "MLMTransformer (a Transformer with transformer_task fill-mask) then SpladePooling")
    value = st_config.get("max_active_dims")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
        raise UnsupportedLayout(f"config_sentence_transformers.json: max_active_dims must be a positive integer, "
                                f"not {value!r}")
    return value


def _json(read: FileReader, path: str) -> dict[str, Any]:
    text = read(path)
    if text is None:
        return {}
    value = _loads(text, path)
    return value if isinstance(value, dict) else {}


def _loads(text: str, path: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise UnsupportedLayout(f"{path} is not valid JSON: {error}") from None


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name
