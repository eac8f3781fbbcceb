"""observe.otlp_transport: the exporter sends through observe.otlp_plain_http (http://) or the SDK's urllib3 transport
(https://) wherever requests would have sent the same way, and keeps requests where the environment or the session
asks for what only requests does."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from opentelemetry.exporter.http.transport._requests import RequestsHTTPTransport
from opentelemetry.exporter.http.transport._urllib3 import Urllib3HTTPTransport
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanKind

from models_registry.observe.otlp_plain_http import PlainHTTPTransport
from models_registry.observe.otlp_transport import lean_transport
from models_registry.observe.span_encoding import encode_queued
from models_registry.observe.span_export import EncodedSpanExporter
from models_registry.observe.trace_context import pack_context

ENDPOINT = "http://127.0.0.1:4318/v1/traces"
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NETRC")


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No proxy, CA bundle or .netrc from the machine running the tests."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[bytes]]]:
    """A real OTLP/HTTP endpoint on a free loopback port: (its URL, the bodies it got)."""
    bodies: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", bodies
    server.shutdown()
    server.server_close()


def _transport(exporter: EncodedSpanExporter) -> object:
    return exporter._client._transport  # type: ignore[attr-defined]


def test_spans_go_out_over_the_plain_transport_and_arrive_whole(receiver: tuple[str, list[bytes]]) -> None:
    url, bodies = receiver
    exporter = EncodedSpanExporter(endpoint=url)
    assert type(_transport(exporter)) is PlainHTTPTransport
    assert type(_transport(EncodedSpanExporter(endpoint=url.replace("http:", "https:")))) is Urllib3HTTPTransport
    exporter.bare = (Resource.create({"service.name": "web"}), InstrumentationScope("models_registry"))
    contexts = [pack_context(0xABC, 7 + n, 1) for n in range(3)]
    spans = encode_queued("inference.queue", SpanKind.INTERNAL, {"hosting.model": "m"},
                          [(context, 1_000) for context in contexts], 2_000, bytes(range(1, 25)))
    assert exporter.export(spans) is SpanExportResult.SUCCESS  # type: ignore[arg-type]
    exporter.shutdown()
    (body,) = bodies
    got = ExportTraceServiceRequest.FromString(body).resource_spans[0].scope_spans[0].spans
    assert [(s.parent_span_id, s.span_id) for s in got] == [
        (context[16:24], bytes(range(1 + 8 * n, 9 + 8 * n))) for n, context in enumerate(contexts)]


@pytest.mark.parametrize(("variables", "lean"), [
    ({"HTTP_PROXY": "http://proxy.example:3128"}, False),
    ({"ALL_PROXY": "http://proxy.example:3128"}, False),
    ({"HTTP_PROXY": "http://proxy.example:3128", "NO_PROXY": "127.0.0.1"}, True),  # this endpoint goes direct
    ({"HTTPS_PROXY": "http://proxy.example:3128"}, True),  # for https endpoints only
], ids=["http proxy", "all proxy", "no_proxy for it", "another scheme's proxy"])
def test_a_proxy_for_the_endpoint_keeps_requests(monkeypatch: pytest.MonkeyPatch, variables: dict[str, str],
                                                lean: bool) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    sent_by = type(_transport(EncodedSpanExporter(endpoint=ENDPOINT)))
    assert sent_by is (PlainHTTPTransport if lean else RequestsHTTPTransport)


def test_a_netrc_entry_for_the_collector_keeps_requests(tmp_path: Path) -> None:
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine 127.0.0.1 login collector password secret\n")
    netrc.chmod(0o600)
    assert type(_transport(EncodedSpanExporter(endpoint=ENDPOINT))) is RequestsHTTPTransport


def test_the_ca_bundle_requests_would_use_is_the_pools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pool = _transport(EncodedSpanExporter(endpoint=ENDPOINT.replace("http:", "https:")))._pool  # type: ignore[attr-defined]
    assert pool.connection_pool_kw["ca_certs"] == requests.utils.DEFAULT_CA_BUNDLE_PATH
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    pool = _transport(EncodedSpanExporter(endpoint=ENDPOINT.replace("http:", "https:")))._pool  # type: ignore[attr-defined]
    assert pool.connection_pool_kw["ca_certs"] == str(bundle)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(tmp_path))  # a directory of CAs: only requests reads one
    assert type(_transport(EncodedSpanExporter(endpoint=ENDPOINT.replace("http:", "https:")))) is RequestsHTTPTransport
    assert type(_transport(EncodedSpanExporter(endpoint=ENDPOINT))) is PlainHTTPTransport  # no TLS: no CA read


def test_a_session_set_up_by_a_credential_provider_is_kept() -> None:
    with_auth = requests.Session()
    with_auth.auth = ("collector", "secret")
    with_header = requests.Session()
    with_header.headers["Authorization"] = "Bearer t"

    class Provided(requests.Session):
        pass

    for session in (with_auth, with_header, Provided()):
        transport = RequestsHTTPTransport(session=session)
        assert lean_transport(transport, ENDPOINT) is transport
