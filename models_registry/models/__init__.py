"""The app's database models (Django finds them through these imports): the registry, tokens, workers, batches,
the usage ledger, stored
responses."""

from models_registry.models.adapters import Adapter
from models_registry.models.batches import BatchChunk, BatchFile, BatchJob
from models_registry.models.registered import (
    CACHEABLE_TASKS,
    DEFAULT_MAX_REQUEST_TOKENS,
    ModelTask,
    RegisteredModel,
)
from models_registry.models.stored_responses import StoredResponse
from models_registry.models.tokens import ApiToken, hash_token
from models_registry.models.usage_records import ANONYMOUS_TOKEN, LedgerFlush, UsageRecord
from models_registry.models.versions import ModelVersion
from models_registry.models.workers import QuarantinedRequest, WorkerHeartbeat

__all__ = ["ANONYMOUS_TOKEN", "Adapter", "CACHEABLE_TASKS", "DEFAULT_MAX_REQUEST_TOKENS", "ApiToken", "BatchChunk", "BatchFile",
           "BatchJob", "LedgerFlush", "ModelTask", "ModelVersion", "QuarantinedRequest", "RegisteredModel",
           "StoredResponse", "UsageRecord", "WorkerHeartbeat", "hash_token"]
