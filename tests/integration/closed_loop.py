"""Closed-loop clients of one model: each sends its next request when its answer arrives, every answer recorded."""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Sample:
    """One answer: when, its status, its vector's length, the version it names, its latency."""

    at: float
    status: int
    length: int
    version: int
    latency_s: float


@dataclass
class Load:
    """clients closed-loop clients, each sending the next request when its answer arrives."""

    port: int
    token: str
    model: str
    clients: int = 8
    samples: list[Sample] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        for index in range(self.clients):
            thread = threading.Thread(target=self._client, args=(index,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _client(self, index: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        body = json.dumps({"inputs": f"client {index} asks for a vector"}).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        while not self.stop.is_set():
            started = time.perf_counter()
            try:
                conn.request("POST", f"/models/{self.model}", body=body, headers=headers)
                response = conn.getresponse()
                raw = response.read()
                status, version = response.status, int(response.getheader("X-Model-Version") or 0)
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
                status, version, raw = 0, 0, b""
            length = len(json.loads(raw)) if status == 200 else 0
            with self.lock:
                self.samples.append(Sample(time.time(), status, length, version, time.perf_counter() - started))

    def since(self, at: float) -> list[Sample]:
        with self.lock:
            return [s for s in self.samples if s.at >= at]

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)
