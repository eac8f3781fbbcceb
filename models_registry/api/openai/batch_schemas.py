"""The Files and Batches routes as the OpenAPI document describes them (shapes and operations)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from models_registry.core import paths
from models_registry.jobs.store import WINDOWS

OPEN = ConfigDict(extra="allow")
Timestamp = Annotated[int | None, Field(description="Unix seconds, or null until it happens")]
BatchStatus = Literal["validating", "in_progress", "finalizing", "completed", "failed", "expired", "cancelling",
                      "cancelled"]
ENDPOINT = paths.JOB_URL_PATTERN


@with_config(OPEN)
class FileObject(TypedDict):
    """OpenAI's File object: a batch input (purpose batch) or a batch's output or errors."""

    id: str
    object: Literal["file"]
    bytes: int
    created_at: int
    expires_at: Timestamp
    filename: str
    purpose: Literal["batch", "batch_output"]
    status: Literal["processed"]
    status_details: None


@with_config(OPEN)
class RequestCounts(TypedDict):
    """Lines of the batch: all, answered 200, and the others (in the error file)."""

    total: int
    completed: int
    failed: int


@with_config(OPEN)
class BatchErrorItem(TypedDict):
    """Why a batch failed as a whole."""

    code: str | None
    message: str | None
    line: int | None
    param: str | None


@with_config(OPEN)
class BatchErrors(TypedDict):
    """OpenAI's list of batch errors."""

    object: Literal["list"]
    data: list[BatchErrorItem]


@with_config(OPEN)
class Batch(TypedDict):
    """OpenAI's Batch object."""

    id: str
    object: Literal["batch"]
    endpoint: str
    errors: BatchErrors | None
    input_file_id: str
    completion_window: str
    status: BatchStatus
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    in_progress_at: Timestamp
    expires_at: Timestamp
    finalizing_at: Timestamp
    completed_at: Timestamp
    failed_at: Timestamp
    expired_at: Timestamp
    cancelling_at: Timestamp
    cancelled_at: Timestamp
    request_counts: RequestCounts
    metadata: dict[str, str] | None


@with_config(OPEN)
class FileList(TypedDict):
    """A page of files, newest first (next page: after=last_id)."""

    object: Literal["list"]
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


@with_config(OPEN)
class BatchList(TypedDict):
    """A page of batches, newest first (next page: after=last_id)."""

    object: Literal["list"]
    data: list[Batch]
    first_id: str | None
    last_id: str | None
    has_more: bool


@with_config(OPEN)
class FileDeleted(TypedDict):
    """DELETE /v1/files/{file_id}: the file's bytes and record are gone."""

    id: str
    object: Literal["file"]
    deleted: Literal[True]


@with_config(ConfigDict(extra="forbid"))
class OutputExpiry(TypedDict):
    """How long the batch's output and error files are kept (default HOSTING_FILE_RETENTION_S)."""

    anchor: Literal["created_at"]
    seconds: Annotated[int, Field(ge=3600, le=2_592_000)]


@with_config(ConfigDict(extra="forbid"))
class BatchCreate(TypedDict):
    """POST /v1/batches: run an uploaded input file; every line's url must be the endpoint."""

    input_file_id: Annotated[str, Field(min_length=1)]
    endpoint: Annotated[str, Field(pattern=ENDPOINT)]
    completion_window: Literal[tuple(WINDOWS)]  # type: ignore[valid-type]
    metadata: NotRequired[Annotated[dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=512)]]
                                    | None, Field(max_length=16)]]
    output_expires_after: NotRequired[OutputExpiry | None]

UPLOAD_BODY = {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["file", "purpose"],
    "properties": {
        "file": {"type": "string", "format": "binary",
                 "description": 'JSONL, one request per line: {"custom_id", "method": "POST", "url", "body"}'},
        "purpose": {"const": "batch"},
        "expires_after[anchor]": {"const": "created_at", "description": "with expires_after[seconds]"},
        "expires_after[seconds]": {"type": "integer", "minimum": 3600, "maximum": 2_592_000,
                                   "description": "delete the file this long after its upload (default: the "
                                                  "server's HOSTING_FILE_RETENTION_S, 30 days)"},
    },
}}}}
PAGE = ({"name": "limit", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1,
                                                                        "maximum": 100, "default": 20}},
        {"name": "after", "in": "query", "required": False, "description": "the last id of the previous page",
         "schema": {"type": "string"}})


def _id(name: str, what: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": what, "schema": {"type": "string"}}


def operations(operation: Any) -> list[Any]:
    """The routes, as api.openapi.openapi's Operation objects (its class is passed in to avoid an import cycle)."""
    file_id, batch_id = _id("file_id", "a file id (file-...)"), _id("batch_id", "a batch id (batch_...)")
    common = {"tags": ("batches",), "openai": True}
    return [
        operation("openai-files", "post", "Upload a batch input file (checked line by line before it is kept).",
                  FileObject, (400, 401, 403, 405, 413, 500), extra=(("requestBody", UPLOAD_BODY),), **common),
        operation("openai-files", "get", "The token's files, newest first.", FileList, (400, 401, 405, 500),
                  parameters=PAGE, **common),
        operation("openai-file", "get", "One file.", FileObject, (401, 404, 405, 500),
                  parameters=(file_id,), **common),
        operation("openai-file", "delete", "Delete one of the token's files (409 while a running batch "
                  "reads it: cancel the batch or wait for its end).", FileDeleted, (401, 404, 405, 409, 500),
                  parameters=(file_id,), **common),
        operation("openai-file-content", "get", "A file's bytes (JSONL).", {"type": "string"},
                  (401, 404, 405, 500), parameters=(file_id,), media="application/jsonl", **common),
        operation("openai-batches", "post", "Run an uploaded file's requests through the workers at batch priority.",
                  Batch, (400, 401, 404, 405, 500), body=BatchCreate,
                  example={"input_file_id": "file-abc", "endpoint": paths.EMBEDDINGS_PATH, "completion_window": "24h"},
                  **common),
        operation("openai-batches", "get", "The token's batches, newest first.", BatchList, (400, 401, 405, 500),
                  parameters=PAGE, **common),
        operation("openai-batch", "get", "One batch: status, request_counts, output and error file ids.",
                  Batch, (401, 404, 405, 500), parameters=(batch_id,), **common),
        operation("openai-batch-cancel", "post", "Stop a batch within seconds (cancelling, then cancelled).",
                  Batch, (400, 401, 404, 405, 500), parameters=(batch_id,), **common),
    ]
