"""What a model's answers look like (a vector's length, a classifier's labels), read from its config.json, and the
rule that a new version keeps the live version's shape unless the operator allows the change.

A canary of another vector size makes one model id answer vectors of two lengths (and a
`dimensions` between them a 400 or a 200 at random); a switch to it changes every client's
vectors at once. The registration refuses it when it can read both configs (a local
directory, or one already in the hub cache: never the network), and a worker refuses it
after loading the version (the config is then at hand): the version shows as failed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from models_registry.catalog import sparse_answer
from models_registry.catalog.specs import ModelSpec, TaskSpec
from models_registry.core import model_files, model_layout
from models_registry.core.model_layout import ModelLayout

VECTOR_TASKS = ("feature-extraction", "image-feature-extraction")
LABEL_TASKS = ("text-classification", "token-classification", "image-classification", "audio-classification")
REFUSED = "refused: "  # the start of a worker's refusal: a public message (no source, no path in it)
HOW_TO_ALLOW = ("register it with --allow-shape-change (the admin: tick \"allow a change of output shape\") "
                "if clients expect the change")


_configs: dict[tuple[str, str], dict[str, Any]] = {}  # found ones only: a hub model's may be downloaded later


def read_config(source: str, revision: str) -> dict[str, Any] | None:
    """config.json of a local directory or a hub id already in the cache (never the network); None if unread."""
    if (source, revision) not in _configs and (config := _read_config(source, revision)) is not None:
        if len(_configs) > 256:
            _configs.clear()
        _configs[(source, revision)] = config
    return _configs.get((source, revision))


def _read_config(source: str, revision: str) -> dict[str, Any] | None:
    local = Path(source).expanduser()
    path: Any = local / "config.json" if local.is_dir() else None
    if path is None:
        try:
            from huggingface_hub import try_to_load_from_cache

            path = try_to_load_from_cache(source, "config.json", revision=revision or None)
        except Exception:  # a source that is no hub id
            return None
    try:
        config = json.loads(Path(path).read_text()) if isinstance(path, (str, Path)) else None
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _hidden_size(config: dict[str, Any]) -> int | None:
    for part in (config, config.get("vision_config") or {}, config.get("text_config") or {}):
        size = part.get("hidden_size") if isinstance(part, dict) else None
        if isinstance(size, int) and size > 0:
            return size
    return None


def vector_size(config: dict[str, Any] | None, layout: ModelLayout) -> int | None:
    """The length of a feature-extraction vector: the last Dense module's, else the pooled hidden size."""
    if layout.dense:
        return layout.dense[-1].out_features
    hidden = _hidden_size(config or {})
    return hidden * len(layout.pooling) if hidden and layout.pooling else hidden


def context_length(config: dict[str, Any] | None, layout: ModelLayout) -> int | None:
    """The most tokens an input keeps: the files' max_seq_length, else the model's positions."""
    if layout.max_seq_length:
        return layout.max_seq_length
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = (config or {}).get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def facts(spec: ModelSpec, task: TaskSpec) -> dict[str, Any]:
    """What a client needs to know of a /v1 model id (vLLM's max_model_len; for embeddings the vector and pooling)."""
    config = read_config(spec.source, spec.revision)
    shown: dict[str, Any] = {"task": task.task, "max_model_len": context_length(config, task.layout)}
    if task.task == "feature-extraction":
        shown |= {"dimensions": vector_size(config, task.layout), "pooling": task.pooling,
                  "normalize": task.normalize, "prompts": sorted(task.parameters.get("prompts") or {})}
    return shown


def read_layout(source: str, revision: str) -> ModelLayout:
    """What the sentence-transformers files of a local directory or a cached hub id say (never the network)."""
    try:
        return model_layout.parse_layout(model_files.file_reader(source, revision or None, cached_only=True))
    except (model_layout.UnsupportedLayout, OSError):
        return ModelLayout()


def shape(config: dict[str, Any] | None, task_kinds: Iterable[str], layout: ModelLayout | None = None) -> dict[str, str]:
    """{task kind: what its answers look like} for the kinds with a shape ("32-float vectors", "labels A, B").

    A feature-extraction vector's length is what the files make it (a Dense projection, concatenated poolings);
    a SPLADE model's are vocabulary-wide sparse vectors, whatever its hidden size.
    """
    shown: dict[str, str] = {}
    if not config:
        return shown
    layout = layout or ModelLayout()
    sparse = sparse_answer.is_sparse(layout)
    for kind in task_kinds:
        if kind == "feature-extraction" and sparse and isinstance(config.get("vocab_size"), int):
            shown[kind] = f"sparse vectors over {config['vocab_size']} words"
        elif kind == "feature-extraction" and (size := vector_size(config, layout)):
            shown[kind] = f"{size}-float vectors"
        elif kind in VECTOR_TASKS and (size := _hidden_size(config)):
            shown[kind] = f"{size}-float vectors"
        elif kind in LABEL_TASKS and isinstance(config.get("id2label"), dict):
            labels = ", ".join(str(v) for _, v in sorted(config["id2label"].items(), key=lambda kv: int(kv[0])))
            shown[kind] = f"labels {labels}"[:300]
    return shown


def difference(live: dict[str, str], new: dict[str, str], live_number: int, new_number: int) -> str | None:
    """The sentence naming both shapes where a kind's answers change; None when none does (or one is unknown)."""
    changed = [(kind, live[kind], new[kind]) for kind in live if kind in new and live[kind] != new[kind]]
    if not changed:
        return None
    what = "; ".join(f"{kind}: v{new_number} answers {after} where live v{live_number} answers {before}"
                     for kind, before, after in changed)
    return f"the output shape changes ({what}); {HOW_TO_ALLOW}"


def change(live_key: tuple[str, ...], new_key: tuple[str, ...], task_kinds: Iterable[str], live_number: int,
           new_number: int) -> str | None:
    """difference() between two versions' compute keys (source, revision, ...), from their configs."""
    kinds = list(task_kinds)
    return difference(shape(read_config(live_key[0], live_key[1]), kinds, read_layout(live_key[0], live_key[1])),
                      shape(read_config(new_key[0], new_key[1]), kinds, read_layout(new_key[0], new_key[1])),
                      live_number, new_number)


def public(error: str) -> bool:
    """Whether a version's error is a shape refusal (shown to API clients; a load error's text is not)."""
    return error.startswith(REFUSED)


class ShapeRefused(Exception):
    """A worker's refusal of a version whose answers would look unlike live's (its message is public)."""


def check(spec: ModelSpec) -> None:
    """On a worker, before and after loading the version spec stands for: ShapeRefused if its shape is not live's.

    Live itself, a model without versions and a version registered with --allow-shape-change pass.
    """
    live = spec.rollout.live
    if not spec.version or spec.version == live or live not in spec.versions or spec.version in spec.shape_changes:
        return
    kinds = [task.task for task in spec.tasks.values()]
    problem = change(spec.versions[live], spec.versions[spec.version], kinds, live, spec.version)
    if problem:
        raise ShapeRefused(REFUSED + problem)
