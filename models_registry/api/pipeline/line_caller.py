"""Running one batch-job line through the route that serves its url, in this process.

The line is called as the same request sent over HTTP would be (the route's checks, the
token's limits, the hand-off to the workers and the answer's shape), so its answer is
byte for byte that request's answer; it runs as the job's owner at batch priority.
"""

from __future__ import annotations

import orjson

from models_registry.api.pipeline import inference_route
from models_registry.api.server import route_table
from models_registry.api.pipeline.call import ApiCall
from models_registry.jobs.line_calls import LineAnswer
from models_registry.jobs.lines import JobLine

BATCH_PRIORITY = "batch"
# A streamed answer has no place in a JSONL output, and a stream opened here would never be
# read (nor closed: the worker would go on generating into it), so such lines are refused
# before the route runs, with the 400 the same request's body error would get.
STREAM_REFUSED = orjson.dumps({
    "error": "\"stream\": true is not available in batch jobs; send the line without it (or false) to get "
             "the whole answer in the output file",
    "error_type": "invalid_input",
})
NOT_SERVED = orjson.dumps({"error": "this url is not an inference route", "error_type": "not_found"})


class LineCaller:
    """Calls the inference route of a line's url, acting as the job's token."""

    async def call(self, line: JobLine, owner_id: int | None, request_id: str) -> LineAnswer:
        """The route's answer to line, run as the job's owner (its token record's id)."""
        if line.body.get("stream") is True:
            return LineAnswer(400, STREAM_REFUSED)
        matched = route_table.match(line.url)
        if matched is None:  # the upload check lets no such line in
            return LineAnswer(404, NOT_SERVED)
        route, path = matched
        call = ApiCall(request_id, "POST", line.url, orjson.dumps(line.body), "application/json",
                       priority=BATCH_PRIORITY, acting_token_id=owner_id)
        answer = await inference_route.serve(route, call, path)
        retry = answer.headers.get("Retry-After")
        return LineAnswer(answer.status, answer.body,
                          float(retry) if retry and retry.replace(".", "", 1).isdigit() else None)
