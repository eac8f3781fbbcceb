"""The API's path table: which paths the API's front door serves and which of them are inference routes.

Every matcher reads it: the ASGI router (hosting.asgi), the front door's route table (api.route_table),
the refusal before the body (api.fast_refusal), batch-job lines (jobs.lines) and Django's URLconf.
"""

from __future__ import annotations

import re

NAME = r"[A-Za-z0-9_-]+"  # a model or task name: Django's <slug:...>
MODEL_ROUTE = rf"models/(?P<name>{NAME})"  # as Django's URLconf writes it (no leading slash)
MODEL_TASK_ROUTE = rf"{MODEL_ROUTE}/(?P<task>{NAME})"
MODEL_PATH = re.compile(rf"^/{MODEL_ROUTE}(?:/(?P<task>{NAME}))?$")  # POST /models/<name>[/<task>]
EMBEDDINGS_PATH = "/v1/embeddings"
CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
RERANK_PATH = "/rerank"
TOKENIZE_PATH = "/tokenize"
USAGE_PATH = "/v1/usage"  # the calling token's usage ledger (GET)
OPENAI_PREFIX = "/v1/"  # errors in OpenAI's shape
FILES_PREFIX = "/v1/files"  # batch input uploads: a larger body limit, the token checked before the body
# Paths the API's front door serves (the rest, such as /admin/ and /dashboard/, go to Django's full stack).
FRONT_DOOR_PREFIXES = ("/models", OPENAI_PREFIX, "/health", "/ready", RERANK_PATH, TOKENIZE_PATH)


def model_path(path: str) -> tuple[str, str | None] | None:
    """(model, task or None for its default) of a /models/<name>[/<task>] path, else None."""
    found = MODEL_PATH.match(path)
    if found is None:
        return None
    return found["name"], found["task"]

