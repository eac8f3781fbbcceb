"""OpenTelemetry traces end to end: a real OTLP/HTTP receiver in the test decodes what the web and the worker
export (opentelemetry-proto); each client's traceparent is continued, the worker's spans join the trace, a batch
span links the requests it carried (its forward and its replies' round trip inside it), a request's Redis calls
are spans under its own, and each request's log line names its trace id; under a parent-based sampler a client's
unsampled trace costs no span, web or worker."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests import model_factory
from tests.integration.common import sentences
from tests.stack import Stack, wait_until

pytestmark = [pytest.mark.integration]

MODEL = "minilm"


@dataclass
class Received:
    """One span as the receiver decoded it, with its process' resource attributes."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    links: list[tuple[str, str]] = field(default_factory=list)


def _value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value")) if any_value.WhichOneof("value") else None


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP receiver on a free loopback port: POST /v1/traces, protobuf bodies, every span kept."""

    def __init__(self) -> None:
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # imported here: the other tiers
        # run in this process (tests/django/test_tracing_off.py checks subprocesses, but keep this one lean too)

        self.spans: list[Received] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
                with collector.lock:
                    for resource_spans in request.resource_spans:
                        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                        for scope in resource_spans.scope_spans:
                            for span in scope.spans:
                                collector.spans.append(Received(
                                    span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(), span.name,
                                    span.kind, {a.key: _value(a.value) for a in span.attributes}, resource,
                                    [(link.trace_id.hex(), link.span_id.hex()) for link in span.links]))
                answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def of_trace(self, trace_id: str) -> list[Received]:
        with self.lock:
            return [span for span in self.spans if span.trace_id == trace_id]

    def all(self) -> list[Received]:
        with self.lock:
            return list(self.spans)


@pytest.fixture(scope="module")
def collector() -> Iterator[Collector]:
    server = Collector()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def traced(collector: Collector) -> Iterator[Stack]:
    """A stack whose web and worker export to the collector, every request sampled, batches exported at once."""
    yield from _exporting_stack(collector, "always_on", "", batch_delay_ms=20)


def _exporting_stack(collector: Collector, sampler: str, service: str, batch_delay_ms: int) -> Iterator[Stack]:
    """A stack (web, worker, the MiniLM model) exporting its spans to the collector under sampler."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
           "OTEL_TRACES_SAMPLER": sampler, "OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_SERVICE_NAME": service}
    with Stack.started(extra_env=env) as stack:
        stack.manage("register_model", MODEL, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--max-batch-size", "32",
                     "--max-batch-delay-ms", str(batch_delay_ms), "--timeout", "60")
        stack.create_token("all")
        stack.start_worker()
        stack.start_web()
        stack.wait_ready([MODEL])
        yield stack


async def _post_traced(url: str, token: str, texts: list[str], parents: list[str]) -> list[int]:
    async with httpx.AsyncClient(timeout=60) as client:
        async def one(text: str, parent: str) -> int:
            response = await client.post(url, json={"inputs": text}, headers={
                "Authorization": f"Bearer {token}", "traceparent": parent})
            return response.status_code

        return list(await asyncio.gather(*(one(t, p) for t, p in zip(texts, parents, strict=True))))


def test_sixteen_traced_requests_join_web_and_worker_spans(traced: Stack, collector: Collector) -> None:
    clients = [(os.urandom(16).hex(), os.urandom(8).hex()) for _ in range(16)]
    parents = [f"00-{trace_id}-{span_id}-01" for trace_id, span_id in clients]
    statuses = asyncio.run(_post_traced(f"{traced.url}/models/{MODEL}", traced.tokens["all"], sentences(16, 5),
                                        parents))
    assert statuses == [200] * 16

    def server_span(trace_id: str) -> Received | None:
        return next((s for s in collector.of_trace(trace_id) if s.resource.get("hosting.role") == "web"
                     and s.kind == 2), None)  # SPAN_KIND_SERVER

    def complete() -> bool:
        for trace_id, _ in clients:
            roles = {s.resource.get("hosting.role") for s in collector.of_trace(trace_id)}
            names = {s.name for s in collector.of_trace(trace_id)}
            if roles != {"web", "worker"} or "inference.queue" not in names:
                return False
        linked = {link for s in collector.all() if s.name == "inference.batch" for link in s.links}
        return all((span := server_span(t)) is not None and (t, span.span_id) in linked for t, _ in clients)

    wait_until(complete, 20, "spans of the web and the worker in every trace, and batches linking every request")
    for trace_id, client_span in clients:
        server = server_span(trace_id)
        assert server is not None and server.parent_id == client_span  # the client's span is its parent
        assert server.name == "POST /models/{name}" and server.attributes["http.response.status_code"] == 200
        assert server.attributes["hosting.model"] == MODEL and server.attributes["hosting.model_version"] >= 1
        assert isinstance(server.attributes["hosting.token_id"], int)
        assert traced.tokens["all"] not in str(server.attributes)  # the token id, never the token
        queue = next(s for s in collector.of_trace(trace_id) if s.name == "inference.queue")
        assert queue.parent_id == server.span_id and queue.resource["service.name"] == "model-hosting-worker"
        assert server.resource["service.name"] == "model-hosting-web"
        assert {"service.instance.id", "process.pid"} <= set(server.resource)
    batches = [s for s in collector.all() if s.name == "inference.batch"]
    assert all(s.attributes["hosting.batch.size"] >= 1 and s.attributes["hosting.device"] == "cpu" for s in batches)
    assert sum(len(s.links) for s in batches) >= 16
    for child in ("inference.forward", "inference.reply"):  # each batch's forward, and its replies' round trip
        wait_until(lambda: {s.parent_id for s in collector.all() if s.name == child} >= {s.span_id for s in batches},
                   10, f"an {child} span under every batch")
    # redis-py's instrumentation: the hand-off's Redis calls nest under a request's span (a turn's calls, sent
    # together, under the first request of that turn), in the web's process
    redis_parents = {s.parent_id for s in collector.all() if s.kind == 3 and s.resource.get("hosting.role") == "web"}
    assert redis_parents & {server_span(trace_id).span_id for trace_id, _ in clients}  # type: ignore[union-attr]
    assert not any(s.kind == 3 and s.parent_id == "" for s in collector.all())  # no Redis call starts a trace
    log = (traced.workdir / "web-0.log").read_text()
    assert all(f"trace={trace_id}" in log for trace_id, _ in clients)


def test_a_request_without_traceparent_starts_its_own_trace(traced: Stack, collector: Collector) -> None:
    response = httpx.post(f"{traced.url}/models/{MODEL}", json={"inputs": "no parent"}, timeout=60,
                          headers={"Authorization": f"Bearer {traced.tokens['all']}", "X-Request-Id": "no-parent-1"})
    assert response.status_code == 200
    log = (traced.workdir / "web-0.log")
    line = wait_until(lambda: next((x for x in log.read_text().splitlines() if "id=no-parent-1" in x), None), 10,
                      "the request's log line")
    trace_id = line.rsplit("trace=", 1)[1].split()[0]
    spans = wait_until(lambda: [s for s in collector.of_trace(trace_id) if s.kind == 2], 10, "its server span")
    assert spans[0].parent_id == ""


@pytest.fixture(scope="module")
def parent_based(collector: Collector) -> Iterator[Stack]:
    """A stack on the SDK's default sampler (parentbased_always_on): a client's sampling decision is followed."""
    yield from _exporting_stack(collector, "parentbased_always_on", "parent-based", batch_delay_ms=50)


def test_an_unsampled_trace_costs_no_span_anywhere_and_its_batch_links_only_the_sampled(
        parent_based: Stack, collector: Collector) -> None:
    sampled, unsampled = os.urandom(16).hex(), os.urandom(16).hex()
    parents = [f"00-{unsampled}-{os.urandom(8).hex()}-00", f"00-{sampled}-{os.urandom(8).hex()}-01"] * 2
    statuses = asyncio.run(_post_traced(f"{parent_based.url}/models/{MODEL}", parent_based.tokens["all"],
                                        sentences(4, 9), parents))
    assert statuses == [200] * 4

    def complete() -> bool:
        names = [s.name for s in collector.of_trace(sampled)]
        return names.count("inference.queue") == 2 and "POST /models/{name}" in names and any(
            sampled in {t for t, _ in s.links} for s in collector.all() if s.name == "inference.batch")

    wait_until(complete, 20, "the sampled trace's web and worker spans, and a batch linking it")
    time.sleep(0.5)  # five of the processes' export intervals: what the unsampled trace had would be here by now
    assert collector.of_trace(unsampled) == []
    linked = {t for s in collector.all() if s.name == "inference.batch" for t, _ in s.links}
    assert unsampled not in linked
    log = (parent_based.workdir / "web-0.log").read_text()
    assert f"trace={unsampled}" in log and f"trace={sampled}" in log  # the log line names it all the same
