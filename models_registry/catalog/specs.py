"""Plain snapshots of the registry, read from the database by web and worker alike."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from models_registry.catalog import model_settings
from models_registry.core import model_layout
from models_registry.core.batch_types import BatchPolicy
from models_registry.catalog.rollout import Rollout, split_wire, wire_name


@dataclass(frozen=True)
class TaskSpec:
    """One task of a model as the worker and views need it."""

    name: str
    task: str
    parameters: dict[str, Any]
    pooling: str
    normalize: bool
    policy: BatchPolicy
    timeout_s: float
    cache_ttl_s: int = 0  # 0 = no response cache
    max_batch_queue_size: int | None = None  # None = half of max_queue_size
    max_request_tokens: int = 0  # tokens one request may make the model compute; 0 = no limit
    cache_shared: bool = False  # cached results shared between API tokens (a probe risk): off = per token
    # What the operator set ("" / None: what the model's files say; pooling and normalize above are the
    # values in effect as the registration read the files) and what the files said (core.model_layout).
    pooling_override: str = ""
    normalize_override: bool | None = None
    layout: model_layout.ModelLayout = field(default_factory=model_layout.ModelLayout)


@dataclass(frozen=True)
class AdapterSpec:
    """A LoRA adapter a base model serves: its name (a client's model name) and where its files are."""

    name: str  # a canary's is its wire name, "<adapter>.v<N>" (catalog.rollout.wire_name)
    source: str
    revision: str = ""
    version: int = 0  # its files' number (models.Adapter.version; a canary's is the next)
    canary_of: str = ""  # a canary: the adapter whose requests it answers a share of
    percent: int = 0  # a canary: that share, 0-100

    @property
    def wire(self) -> str:
        """The name workers know these files by, "<adapter>.v<N>" (its name alone when unversioned).

        Each version has its own: a worker whose registry view is a refresh behind the web's does
        not list the new one yet and holds its requests (worker.adapter_waits) rather than compute
        them with the files it still lists under the adapter's name.
        """
        return wire_name(self.canary_of or self.name, self.version)


# The base tasks an adapter changes (models.adapters.ADAPTER_TASKS: the registry is not imported here).
ADAPTER_TASKS = ("feature-extraction", "text-classification", "text-ranking", "text-generation")


@dataclass(frozen=True)
class ModelSpec:
    """One registered model with its tasks (the first is the default task)."""

    name: str
    source: str
    revision: str
    device: str
    dtype: str
    enabled: bool
    tasks: dict[str, TaskSpec] = field(default_factory=dict)
    default_task: str = ""
    load_generation: int = 0
    backend: str = "auto"  # auto, torch, onnxruntime: what runs the embedding forwards
    keep_loaded: bool = False  # pinned: loaded at start, never evicted for another model
    version: int = 0  # the live version (0: a model without versions); on a worker, the version this spec loads
    rollout: Rollout = field(default_factory=Rollout)
    # What each held version computes: {number: (source, revision, dtype, backend)}
    versions: dict[int, tuple[str, str, str, str]] = field(default_factory=dict)
    # Versions whose answers may look unlike live's: registered with --allow-shape-change, or live before (a rollback)
    shape_changes: frozenset[int] = frozenset()
    # A base: its enabled adapters. An adapter's entry (base set: its base model's name) is its base's spec
    # under the adapter's name, with its adapter-capable tasks and adapters = (itself,).
    adapters: tuple[AdapterSpec, ...] = ()
    base: str = ""

    def load_key(self) -> tuple[str, str, str, str, int, str]:
        """What forces a reload when it changes; adapters never do (they hook the loaded base's eager layers)."""
        return (self.source, self.revision, self.device, self.dtype, self.load_generation, self.backend)

    @property
    def served_as(self) -> str:
        """The model whose workers and queues answer it: its base for an adapter, else itself."""
        return self.base or self.name

    @property
    def adapter(self) -> AdapterSpec | None:
        """The adapter an adapter's entry stands for (None: a model)."""
        return self.adapters[0] if self.base else None

    @property
    def adapter_canary(self) -> AdapterSpec | None:
        """An adapter entry's canary: new files answering a share of its requests (None: none, or a model)."""
        return self.adapters[1] if self.base and len(self.adapters) > 1 else None

    def find_adapter(self, wire: str) -> AdapterSpec | None:
        """One of this base's adapter versions by its wire name (AdapterSpec.wire)."""
        return next((a for a in self.adapters if a.wire == wire), None)

    def adapter_for(self, wire: str) -> AdapterSpec | None:
        """The files that compute a request naming wire: that version where listed, else its adapter's live files.

        A web a refresh behind this view names a version replaced since (or a canary dropped since): its
        request is computed by the live files rather than refused. None: the adapter is not listed at all.
        """
        return self.find_adapter(wire) or self._live_adapter(split_wire(wire)[0])

    def awaits_adapter(self, wire: str) -> bool:
        """Whether wire names an adapter version this view does not list yet: none of that adapter, or one
        newer than its live files (a change the web has read before this view)."""
        if self.find_adapter(wire) is not None:
            return False
        name, version = split_wire(wire)
        live = self._live_adapter(name)
        return live is None or version > live.version

    def _live_adapter(self, name: str) -> AdapterSpec | None:
        """The adapter's live files (never its canary)."""
        return next((a for a in self.adapters if a.name == name and not a.canary_of), None)


def worker_specs(specs: dict[str, ModelSpec]) -> dict[str, ModelSpec]:
    """What workers hold: one spec per version to serve, named by its wire name (catalog.rollout)."""
    held: dict[str, ModelSpec] = {}
    for name, spec in specs.items():
        if spec.base:
            continue  # an adapter is served by its base's workers: nothing of its own to load
        if not spec.version:
            held[name] = spec
            continue
        for number in spec.rollout.held():
            if number not in spec.versions:
                continue
            source, revision, dtype, backend = spec.versions[number]
            held[wire_name(name, number)] = replace(spec, name=wire_name(name, number), source=source,
                                                    revision=revision, dtype=dtype, backend=backend, version=number)
    return held


def _rollout(model: Any) -> Rollout:
    return Rollout(live=model.live_version, target=model.target_version, previous=model.previous_version,
                   candidate=model.candidate_version,
                   mode=model.candidate_mode, percent=model.candidate_percent, sticky=model.candidate_sticky)


def read_specs() -> dict[str, ModelSpec]:
    """Every registered model and its tasks, in one query triple (sync ORM); source & co. are the live version's."""
    from models_registry.models import Adapter, RegisteredModel

    adapters: dict[int, list[AdapterSpec]] = {}
    disabled: dict[int, list[AdapterSpec]] = {}  # listed (and answered 503 disabled), never loaded
    for adapter in Adapter.objects.order_by("name"):
        listed = (adapters if adapter.enabled else disabled).setdefault(adapter.base_id, [])
        listed.append(AdapterSpec(adapter.name, adapter.source, adapter.revision, adapter.version))
        if adapter.canary_source:  # workers list it under its wire name beside the live files
            listed.append(AdapterSpec(wire_name(adapter.name, adapter.version + 1), adapter.canary_source,
                                      adapter.canary_revision, adapter.version + 1, adapter.name,
                                      adapter.canary_percent))
    specs: dict[str, ModelSpec] = {}
    for model in RegisteredModel.objects.prefetch_related("tasks", "versions"):
        rollout = _rollout(model)
        versions = {v.number: v.compute_key() for v in model.versions.all() if v.number in rollout.held()}
        live = versions.get(model.live_version) or model.compute_key()
        tasks = sorted(model.tasks.all(), key=lambda t: t.id)
        task_specs = {
            t.name: TaskSpec(
                name=t.name,
                task=t.task,
                parameters=(model_settings.with_prompts(t.layout(), dict(t.parameters or {}))
                            if t.task == "feature-extraction" else dict(t.parameters or {})),
                pooling=model_settings.pooling_of(t.pooling, t.layout()),
                normalize=model_settings.normalize_of(t.normalize, t.layout()),
                pooling_override=t.pooling,
                normalize_override=t.normalize,
                layout=t.layout(),
                policy=BatchPolicy(
                    max_batch_size=t.max_batch_size,
                    max_batch_tokens=t.max_batch_tokens,
                    max_batch_delay_s=t.max_batch_delay_ms / 1000.0,
                    max_queue_size=t.max_queue_size,
                ),
                timeout_s=t.timeout_s,
                cache_ttl_s=t.cache_ttl_s,
                max_batch_queue_size=t.max_batch_queue_size,
                max_request_tokens=t.max_request_tokens,
                cache_shared=t.cache_shared,
            )
            for t in tasks
        }
        specs[model.name] = ModelSpec(
            name=model.name, source=live[0], revision=live[1], device=model.device,
            dtype=live[2], enabled=model.enabled, tasks=task_specs,
            default_task=tasks[0].name if tasks else "",
            load_generation=model.load_generation, backend=live[3], keep_loaded=model.keep_loaded,
            version=model.live_version if model.live_version in versions else 0, rollout=rollout, versions=versions,
            shape_changes=frozenset(v.number for v in model.versions.all()
                                    if v.allow_shape_change or v.live_since is not None),
            adapters=tuple(adapters.get(model.id, ())),
        )
        specs.update(adapter_entries(specs[model.name]))
        specs.update({name: replace(entry, enabled=False) for name, entry in adapter_entries(
            replace(specs[model.name], adapters=tuple(disabled.get(model.id, ())))).items()})
    return specs


def adapter_entries(base: ModelSpec) -> dict[str, ModelSpec]:
    """Each adapter of base as an entry of its own: a client's model name, answered by the base's workers."""
    tasks = {name: task for name, task in base.tasks.items() if task.task in ADAPTER_TASKS}
    default = base.default_task if base.default_task in tasks else next(iter(tasks), "")
    canaries = {a.canary_of: a for a in base.adapters if a.canary_of}
    return {adapter.name: replace(base, name=adapter.name, base=base.name, tasks=tasks, default_task=default,
                                  adapters=(adapter, canaries[adapter.name]) if adapter.name in canaries else (adapter,))
            for adapter in base.adapters if not adapter.canary_of}
