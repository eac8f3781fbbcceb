"""media.fetch: URLs only from listed hosts, never a private address, with a timeout and a byte cap."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from models_registry.core.errors import InvalidInput, TooLarge
from models_registry.media import fetch
from tests import media_factory

IMAGE = media_factory.png()


class Handler(BaseHTTPRequestHandler):
    """/cat.png, a redirect to another host, a large file and a slow one."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        port = self.server.server_address[1]
        if self.path == "/away":
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.2:{port}/cat.png")
            self.end_headers()
            return
        if self.path == "/here":
            self.send_response(302)
            self.send_header("Location", "/cat.png")
            self.end_headers()
            return
        if self.path == "/slow":
            time.sleep(1.5)
        body = IMAGE * (200 if self.path == "/big" else 1)
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()


@pytest.mark.parametrize(("address", "public"), [
    ("8.8.8.8", True), ("2606:4700::1111", True), ("127.0.0.1", False), ("10.1.2.3", False), ("192.168.0.1", False),
    ("172.16.0.1", False), ("169.254.169.254", False), ("::1", False), ("fe80::1", False), ("::ffff:127.0.0.1", False),
    ("0.0.0.0", False), ("224.0.0.1", False), ("100.64.0.1", False), ("fd00::1", False),
])
def test_only_global_addresses_are_public(address: str, public: bool) -> None:
    assert fetch.is_public(address) is public


async def test_nothing_is_fetched_unless_hosts_are_listed(settings: object, server: int) -> None:
    settings.HOSTING_MEDIA_FETCH_HOSTS = []
    with pytest.raises(InvalidInput, match="fetches none"):
        await fetch.fetch(f"http://localhost:{server}/cat.png", "inputs")
    settings.HOSTING_MEDIA_FETCH_HOSTS = ["images.example.org"]
    with pytest.raises(InvalidInput, match="not a host"):
        await fetch.fetch(f"http://localhost:{server}/cat.png", "inputs")
    with pytest.raises(InvalidInput, match="not a host"):
        await fetch.fetch("file:///etc/passwd", "inputs")


async def test_a_listed_host_on_a_loopback_address_is_refused(settings: object, server: int) -> None:
    settings.HOSTING_MEDIA_FETCH_HOSTS = ["localhost"]
    with pytest.raises(InvalidInput, match="private or reserved"):
        await fetch.fetch(f"http://localhost:{server}/cat.png", "inputs")


@pytest.fixture
def loopback_allowed(monkeypatch: pytest.MonkeyPatch, settings: object) -> None:
    """The one address rule lifted, so the rest of the path runs against a real local server."""
    monkeypatch.setattr(fetch, "is_public", lambda address: address == "127.0.0.1")
    settings.HOSTING_MEDIA_FETCH_HOSTS = ["localhost"]
    settings.HOSTING_MEDIA_FETCH_TIMEOUT_S = 1.0
    settings.HOSTING_MEDIA_FETCH_MAX_BYTES = 10 * len(IMAGE)


async def test_fetch_follows_listed_redirects_and_keeps_its_limits(loopback_allowed: None, server: int) -> None:
    data, content_type = await fetch.fetch(f"http://localhost:{server}/here", "inputs")
    assert data == IMAGE and content_type == "image/png"
    with pytest.raises(InvalidInput, match="127.0.0.2 is not a host"):
        await fetch.fetch(f"http://localhost:{server}/away", "inputs")
    with pytest.raises(TooLarge):
        await fetch.fetch(f"http://localhost:{server}/big", "inputs")
    with pytest.raises(InvalidInput, match="took over"):
        await fetch.fetch(f"http://localhost:{server}/slow", "inputs")
