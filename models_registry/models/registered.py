"""Registered models and their tasks, with each task's defaults and queue settings."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from models_registry.core import model_files, model_layout, multi_vector_settings, sources
from models_registry.core.errors import InvalidInput
from models_registry.core.task_key import TaskKey
from models_registry.tasks.task_inputs import SUPPORTED_TASKS, validate_parameters

# Tasks whose answer depends only on the model, the parameters and the input (no sampling).
CACHEABLE_TASKS = ("feature-extraction", "fill-mask", "text-classification", "token-classification",
                   "question-answering", "zero-shot-classification", "text-ranking", "image-classification",
                   "zero-shot-image-classification", "image-feature-extraction", "object-detection",
                   "audio-classification", "automatic-speech-recognition")


RUN_TEST_INPUT = "run_test_input"  # the admin's test input: inference without an API token
MANAGE_VERSIONS = "manage_versions"  # promote, roll back, and edits that make a new version

VERSION_FIELDS = ("live_version", "target_version", "previous_version", "candidate_version", "candidate_mode",
                  "candidate_percent", "candidate_sticky")


class RegisteredModel(models.Model):
    """A model the server hosts: where its weights come from and where it runs."""

    DTYPES = [(d, d) for d in ("auto", "float32", "float16", "bfloat16", "int8")]
    BACKENDS = [(b, b) for b in ("auto", "torch", "onnxruntime")]

    name = models.SlugField(max_length=100, unique=True, help_text="Used in URLs: /models/<name>.")
    source = models.CharField(
        max_length=500, help_text="A hub id such as google-bert/bert-base-uncased, or a local directory."
    )
    revision = models.CharField(max_length=100, blank=True, help_text="Hub revision (branch, tag or commit).")
    device = models.CharField(
        max_length=20, blank=True, help_text="cpu, cuda, cuda:1, mps; empty = the worker's HOSTING_DEVICE."
    )
    dtype = models.CharField(
        max_length=10, choices=DTYPES, default="auto",
        help_text="int8: dynamic quantization on ONNX Runtime (CPU), refused at load if its vectors stray from fp32.",
    )
    backend = models.CharField(
        max_length=20, choices=BACKENDS, default="auto",
        help_text="Embedding forwards: auto = ONNX Runtime on CPU when its outputs match torch's at load, else torch.",
    )
    enabled = models.BooleanField(default=True)
    keep_loaded = models.BooleanField(
        default=False, help_text="Pin the model: workers load it at start and never unload it to make room for others.",
    )
    load_generation = models.PositiveIntegerField(
        default=0, editable=False, help_text="Bumped by the admin's 'Load now': workers reload the model."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # Versions (models.versions): 0 = none. The live version answers; a target replaces it once it is warm on
    # every worker serving the model; a candidate answers a share of requests (canary) or copies of them (shadow).
    live_version = models.PositiveIntegerField(default=0, editable=False)
    target_version = models.PositiveIntegerField(default=0, editable=False)
    previous_version = models.PositiveIntegerField(default=0, editable=False)
    candidate_version = models.PositiveIntegerField(default=0, editable=False)
    candidate_mode = models.CharField(max_length=10, blank=True, editable=False,
                                      choices=[("", "none"), ("canary", "canary"), ("shadow", "shadow")])
    candidate_percent = models.PositiveIntegerField(default=0, editable=False)
    candidate_sticky = models.BooleanField(default=False, editable=False)

    class Meta:
        ordering = ["name"]
        # Beside Django's add/change/delete/view (the admin checks each on the server: admin.py).
        permissions = [
            (RUN_TEST_INPUT, "Can run a test input through the model's workers"),
            (MANAGE_VERSIONS, "Can promote and roll back versions, and change what the model computes"),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """Reject a device string the workers could not parse, missing local paths and malformed hub ids."""
        device = self.device = self.device.strip()  # " cuda" would pass here and fail in the worker
        if device and not (device in {"cpu", "mps", "cuda"} or (device.startswith("cuda:") and device[5:].isdigit())):
            raise ValidationError({"device": "Use cpu, cuda, cuda:N or mps (or leave empty)."})
        if self.dtype == "int8" and self.backend == "torch":
            raise ValidationError({"dtype": "int8 runs on ONNX Runtime: set backend to auto or onnxruntime."})
        if self.dtype == "int8" and device not in {"", "cpu"}:
            raise ValidationError({"dtype": "int8 runs on the CPU only: set device to cpu (or leave it empty)."})
        problem = sources.source_problem(self.source)
        if problem:
            raise ValidationError({"source": problem})
        if self.name and self._meta.apps.get_model("models_registry", "Adapter").objects.filter(name=self.name).exists():
            raise ValidationError({"name": f"An adapter is named {self.name!r}: models and adapters share one namespace."})

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save; an edit of a stored model leaves the version fields alone (catalog.version_changes writes those).

        A form read before a switch and saved after it must not undo the switch.
        """
        if self.pk is not None and kwargs.get("update_fields") is None and not kwargs.get("force_insert"):
            kwargs["update_fields"] = [f.name for f in self._meta.concrete_fields
                                       if not f.primary_key and f.name not in VERSION_FIELDS]
        super().save(*args, **kwargs)

    def compute_key(self) -> tuple[str, str, str, str]:
        """What the model computes (a change makes a new version)."""
        return (self.source, self.revision, self.dtype, self.backend)

    def default_task(self) -> ModelTask | None:
        """The task served by POST /models/<name>: the first one registered."""
        return self.tasks.order_by("id").first()


# What a task's pooling may be set to; empty is "what the files say".
POOLING_CHOICES = (*model_layout.POOLING_MODES, "none")
# The tasks whose answers the sentence-transformers files shape (pooling, projection, prompts, scoring).
LAYOUT_TASKS = ("feature-extraction", "text-ranking", "text-generation")  # text-generation: the chat template


def _without_modules(read: model_files.FileReader) -> model_files.FileReader:
    """A reader that hides sentence-transformers' module list (a generation task computes none of it)."""
    return lambda path: None if path == "modules.json" else read(path)


# 32 inputs at a 512-token model's limit: a few seconds of a CPU worker, not its whole timeout.
DEFAULT_MAX_REQUEST_TOKENS = 16384


class ModelTask(models.Model):
    """One pipeline task of a model, with its own defaults and queue settings."""

    POOLINGS = [("", "from the model's files (mean without them)"), *((m, m) for m in POOLING_CHOICES)]

    model = models.ForeignKey(RegisteredModel, on_delete=models.CASCADE, related_name="tasks")
    name = models.SlugField(max_length=100, help_text="Used in URLs: /models/<model>/<name>.")
    task = models.CharField(max_length=50, choices=[(t, t) for t in SUPPORTED_TASKS])
    parameters = models.JSONField(default=dict, blank=True, help_text="Defaults merged under each request's.")
    pooling = models.CharField(
        max_length=40, choices=POOLINGS, default="", blank=True,
        help_text="feature-extraction only. Empty: what the model's files say (1_Pooling), mean without them.",
    )
    normalize = models.BooleanField(
        null=True, blank=True, default=None,
        help_text="feature-extraction only: L2-normalize vectors. Unknown: what the model's files say (a Normalize "
                  "module), off without them.",
    )
    file_settings = models.JSONField(
        default=dict, blank=True, editable=False,
        help_text="What the model directory's own files said at registration (core.model_files).",
    )
    max_batch_size = models.PositiveIntegerField(
        default=32, validators=[MinValueValidator(1), MaxValueValidator(4096)]
    )
    max_batch_tokens = models.PositiveIntegerField(
        default=0, help_text="Padded tokens per batch; 0 = no token budget."
    )
    max_batch_delay_ms = models.PositiveIntegerField(
        default=5, validators=[MaxValueValidator(10_000)], help_text="Longest wait after a batch's first item."
    )
    max_queue_size = models.PositiveIntegerField(
        default=1024, validators=[MinValueValidator(1)], help_text="Pending items before 503 overloaded."
    )
    timeout_s = models.FloatField(
        default=30.0, validators=[MinValueValidator(0.1), MaxValueValidator(600)], help_text="Answer 504 after this."
    )
    max_batch_queue_size = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)],
        help_text="Pending items above which batch-priority requests get 503 overloaded (interactive ones are "
                  "still admitted up to max_queue_size); empty = half of max_queue_size.",
    )
    cache_ttl_s = models.PositiveIntegerField(
        default=0, validators=[MaxValueValidator(30 * 86400)],
        help_text="Seconds a result stays in the response cache; 0 = no cache. Deterministic tasks only.",
    )
    cache_shared = models.BooleanField(
        default=False,
        help_text="Share cached results between API tokens. Off: each token has its own entries. On: a token can "
                  "learn whether another sent the same input (a hit is faster and says X-Cache: hit).",
    )
    max_request_tokens = models.PositiveIntegerField(
        default=DEFAULT_MAX_REQUEST_TOKENS,
        help_text="Tokens one request may make the model compute (its inputs after truncation, times prompts, "
                  "labels and windows, plus generated tokens); more is 413 too_large. 0 = no limit. Bounds how long "
                  "one request can hold a worker.",
    )

    class Meta:
        ordering = ["model__name", "id"]
        constraints = [
            models.UniqueConstraint(fields=["model", "name"], name="unique_task_name_per_model"),
            models.CheckConstraint(condition=models.Q(max_batch_size__gte=1), name="max_batch_size_positive"),
            models.CheckConstraint(condition=models.Q(max_queue_size__gte=1), name="max_queue_size_positive"),
            models.CheckConstraint(condition=models.Q(timeout_s__gt=0), name="timeout_positive"),
        ]

    def __str__(self) -> str:
        return str(TaskKey(self.model.name, self.name))

    def read_files(self) -> None:
        """file_settings from what the model directory's files say (a hub id: from this machine's cache only).

        A layout this server cannot compute is a ValidationError that names the module; files not cached
        leave file_settings empty, and the worker reads them at load.
        """
        self.file_settings = {}
        if self.task not in LAYOUT_TASKS or not getattr(self.model, "source", ""):
            return
        read = model_files.file_reader(self.model.source, self.model.revision or None, cached_only=True)
        if self.task == "text-generation":  # only its tokenizer's files matter (the chat template), never modules.json
            read = _without_modules(read)
        try:
            layout = model_layout.parse_layout(read)
            if layout.multi_vector is not None:  # a ColBERT-style model's knobs: refused here, not at its load
                multi_vector_settings.read(layout.kind, layout.multi_vector)
        except (model_layout.UnsupportedLayout, multi_vector_settings.UnsupportedMultiVector) as error:
            raise ValidationError({"task": f"{self.model.source}: {error}"}) from None
        except OSError:  # not cached, or unreadable here: the worker's load reads (and refuses) it
            return
        self.file_settings = layout.to_json()

    def layout(self) -> model_layout.ModelLayout:
        """What the files said at registration (an empty layout when unread)."""
        return model_layout.ModelLayout.from_json(self.file_settings)

    def clean(self) -> None:
        """Reject settings that can never work together, with what to change."""
        if self.model_id is not None or getattr(self, "model", None) is not None:
            self.read_files()
        errors: dict[str, str] = {}
        if not isinstance(self.parameters, dict):
            errors["parameters"] = "Default parameters must be a JSON object, e.g. {\"top_k\": 3}."
        elif self.task in SUPPORTED_TASKS:
            # Defaults are merged into every request unchecked: a bad one would fail them all.
            try:
                validate_parameters(self.task, self.parameters)
            except InvalidInput as error:
                errors["parameters"] = f"Default parameters are not valid for {self.task}: {error.message}"
        if self.max_queue_size is not None and self.max_batch_size and self.max_queue_size < self.max_batch_size:
            errors["max_queue_size"] = (
                f"max_queue_size ({self.max_queue_size}) is below max_batch_size ({self.max_batch_size}): "
                "a full batch could never be queued. Raise it or lower max_batch_size."
            )
        if self.max_batch_tokens and self.max_batch_tokens < 16:
            errors["max_batch_tokens"] = "Use 0 (no budget) or at least 16 tokens; one input alone exceeds a smaller budget."
        if self.max_batch_delay_ms is not None and self.timeout_s and self.max_batch_delay_ms / 1000 >= self.timeout_s:
            errors["max_batch_delay_ms"] = "The batch delay must be shorter than timeout_s, or every request times out."
        if self.max_batch_queue_size and self.max_queue_size and self.max_batch_queue_size > self.max_queue_size:
            errors["max_batch_queue_size"] = (
                f"max_batch_queue_size ({self.max_batch_queue_size}) is above max_queue_size ({self.max_queue_size}): "
                "batch traffic must be shed before interactive traffic. Lower it or leave it empty."
            )
        if self.cache_ttl_s and self.task not in CACHEABLE_TASKS:
            errors["cache_ttl_s"] = (
                f"{self.task} is not deterministic, so its results cannot be cached; set 0. "
                f"Cacheable tasks: {', '.join(CACHEABLE_TASKS)}."
            )
        if errors:
            raise ValidationError(errors)
