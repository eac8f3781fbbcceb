"""LoRA adapters of a registered model: served beside their base, asked for by their own name."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models

from models_registry.core import adapter_files, model_files, sources
from models_registry.models.registered import RegisteredModel

# The base tasks whose forwards an adapter's layers change here (text-generation: in the continuous batch).
ADAPTER_TASKS = ("feature-extraction", "text-classification", "text-ranking", "text-generation")
# Backends that run a fixed copy of the base's graph: they serve the base only.
FIXED_GRAPH = "onnxruntime"


class Adapter(models.Model):
    """A PEFT LoRA adapter of a base model; its name goes wherever a model name goes (unique among both)."""

    name = models.SlugField(max_length=100, unique=True,
                            help_text="Used like a model name: /models/<name>, model=<name>. Unique among models too.")
    base = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="adapters")
    source = models.CharField(max_length=500, help_text="A PEFT adapter directory (adapter_config.json and "
                                                        "adapter_model.safetensors), or its hub id.")
    revision = models.CharField(max_length=100, blank=True, help_text="Hub revision (branch, tag or commit).")
    enabled = models.BooleanField(default=True)
    version = models.PositiveIntegerField(default=1, help_text="The live files' number: each change of source or "
                                                               "revision, promotion and rollback makes the next.")
    previous_source = models.CharField(max_length=500, blank=True, help_text="The live files before the last change: "
                                                                             "a rollback returns to them.")
    previous_revision = models.CharField(max_length=100, blank=True)
    canary_source = models.CharField(max_length=500, blank=True, help_text="New files answering canary_percent of "
                                                                           "the adapter's requests beside the live ones.")
    canary_revision = models.CharField(max_length=100, blank=True)
    canary_percent = models.PositiveSmallIntegerField(default=0, help_text="The canary's share of requests, 0-100.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} (adapter of {self.base_id and self.base.name})"

    def replace_files(self, source: str, revision: str) -> None:
        """New live files at once (the next version); the old ones kept for a rollback. A canary is dropped."""
        if (source, revision) != (self.source, self.revision):
            self.previous_source, self.previous_revision = self.source, self.revision
            self.source, self.revision = source, revision
            self.version += 1
        self.drop_canary()

    def start_canary(self, source: str, revision: str, percent: int) -> None:
        """New files answering percent of the requests beside the live ones (the version after live's)."""
        self.canary_source, self.canary_revision, self.canary_percent = source, revision, percent

    def drop_canary(self) -> None:
        """No canary: every request answered by the live files."""
        self.canary_source, self.canary_revision, self.canary_percent = "", "", 0

    def promote(self) -> None:
        """The canary's files become live (the next version); refused when there is no canary."""
        if not self.canary_source:
            raise ValidationError({"canary_source": f"adapter {self.name!r} has no canary to promote"})
        self.replace_files(self.canary_source, self.canary_revision)

    def rollback(self) -> None:
        """Drop the canary; with none, return to the files live before the last change (the next version)."""
        if self.canary_source:
            self.drop_canary()
            return
        if not self.previous_source:
            raise ValidationError({"previous_source": f"adapter {self.name!r} has no earlier files to roll back to"})
        previous = (self.previous_source, self.previous_revision)
        self.replace_files(*previous)
        self.previous_source, self.previous_revision = "", ""  # a second rollback does not flip back

    def clean(self) -> None:
        """Refuse a name a model has, a source that is not there, and files that do not fit the base."""
        errors: dict[str, str] = {}
        if self.name and RegisteredModel.objects.filter(name=self.name).exists():
            errors["name"] = f"A registered model is named {self.name!r}: adapters and models share one namespace."
        problem = sources.source_problem(self.source) if self.source else "Give the adapter's directory or hub id."
        if problem:
            errors["source"] = problem
        if self.canary_source and (canary_problem := sources.source_problem(self.canary_source)):
            errors["canary_source"] = canary_problem
        if self.canary_percent > 100 or (self.canary_source and not self.canary_percent):
            errors["canary_percent"] = "A canary answers 1-100 percent of the requests."
        if errors:
            raise ValidationError(errors)
        if self.base_id is None:
            return
        base = self.base
        if base.backend == FIXED_GRAPH or base.dtype == "int8":
            raise ValidationError({"base": f"{base.name} runs on ONNX Runtime (backend {base.backend}, dtype "
                                           f"{base.dtype}), which serves the base only: set its backend to auto "
                                           "or torch (and its dtype to other than int8) to serve adapters."})
        kinds = set(base.tasks.values_list("task", flat=True))
        if kinds and not kinds & set(ADAPTER_TASKS):
            raise ValidationError({"base": f"{base.name}'s tasks ({', '.join(sorted(kinds))}) take no adapters here; "
                                           f"adapters serve {', '.join(ADAPTER_TASKS)}."})
        for field, source, revision in (("source", self.source, self.revision),
                                        ("canary_source", self.canary_source, self.canary_revision)):
            if not source:
                continue
            try:
                check_files(source, revision, base.source, base.revision)
            except adapter_files.AdapterProblem as error:
                raise ValidationError({field: str(error)}) from None


def check_files(source: str, revision: str, base_source: str, base_revision: str) -> adapter_files.AdapterManifest | None:
    """The adapter's manifest, checked against the base checkpoint's layers (hub ids: this machine's cache only).

    None: the base is a hub id whose weights this machine has not cached (the worker's load checks it).
    """
    try:
        manifest = adapter_files.read_manifest(*adapter_paths(source, revision), where=source)
    except OSError as error:  # not cached, or unreadable here
        raise adapter_files.AdapterProblem(f"cannot read the adapter's files here: {error}") from None
    try:
        shapes = base_shapes(base_source, base_revision or None)
    except model_files.FilesNotCached:
        return None
    adapter_files.check_against_base(manifest, shapes)
    return manifest


def adapter_paths(source: str, revision: str, cached_only: bool = True) -> tuple[str | None, str | None]:
    """Local paths of an adapter's config and weights (None: missing)."""
    return (model_files.file_path(source, revision or None, adapter_files.CONFIG_FILE, cached_only),
            model_files.file_path(source, revision or None, adapter_files.WEIGHTS_FILE, cached_only))


def base_shapes(source: str, revision: str | None) -> dict[str, tuple[int, ...]]:
    """The base checkpoint's parameter shapes by name, from its safetensors headers (one file, or its shards)."""
    single = model_files.file_path(source, revision, adapter_files.BASE_WEIGHTS, cached_only=True)
    if single is not None:
        return adapter_files.tensor_shapes(single)
    index = model_files.file_path(source, revision, adapter_files.BASE_INDEX, cached_only=True)
    if index is None:
        raise adapter_files.AdapterProblem(f"the base model has no {adapter_files.BASE_WEIGHTS} (nor "
                                           f"{adapter_files.BASE_INDEX}) to check the adapter against")
    shapes: dict[str, tuple[int, ...]] = {}
    for name in adapter_files.shard_names(index):
        found = model_files.file_path(source, revision, name, cached_only=True)
        if found is not None:
            shapes.update(adapter_files.tensor_shapes(found))
    return shapes
