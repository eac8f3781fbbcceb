"""`python -m bench.hostile`: issue 27's and issue 35's attacks against a real stack, and what each costs everyone else.

Two workers serve tiny random models (tests/model_factory). Each attack runs in a thread
while a small request to another model (question answering) and /ready are probed in
turn; printed per attack: the attack's status, seconds and answer bytes, the slowest
probe, how many probes were not a 200 within 1 s (the time others were unavailable is
their count times their duration), the fewest live workers /ready counted, the workers'
peak resident memory while it ran, and whether a worker log shows a requeue.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests import model_factory
from tests.stack import Stack, http_json

QA, EMBED, NLI, MLM = "qa", "minilm", "nli", "mlm"
SMALL_QA = {"inputs": {"question": "Who wrote it?", "context": "Ada wrote it."}}


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _post(stack: Stack, model: str, body: Any) -> tuple[int, int, float]:
    """(status, answer bytes, seconds)."""
    started = time.perf_counter()
    status, _, answer = http_json("POST", f"{stack.url}/models/{model}", body, token=stack.tokens["all"], timeout=120)
    return status, len(json.dumps(answer).encode()), time.perf_counter() - started


def _measure(stack: Stack, name: str, attack: Any) -> dict[str, Any]:
    logs = {p: p.stat().st_size for p in stack.workdir.glob("worker-*.log")}
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(answer=attack()))
    peak = {p.pid: _rss_mb(p.pid) for p in stack.workers}
    thread.start()
    probes: list[tuple[int, float]] = []
    alive: list[int] = []
    after = 0
    while after < 3:
        after += 0 if thread.is_alive() else 1
        status, _, seconds = _post(stack, QA, SMALL_QA)
        probes.append((status, seconds))
        alive.append(http_json("GET", f"{stack.url}/ready", timeout=10)[2].get("checks", {}).get("workers_alive", 0))
        peak = {pid: max(mb, _rss_mb(pid)) for pid, mb in peak.items()}
    thread.join()
    logged = "".join(p.read_bytes()[logs.get(p, 0):].decode(errors="replace") for p in logs)
    bad = [(s, round(t, 2)) for s, t in probes if s != 200 or t > 1.0]
    return {"attack": name, "answer": result.get("answer"), "probes": len(probes),
            "slowest_probe_s": round(max(t for _, t in probes), 3), "unavailable_probes": bad,
            "unavailable_s": round(sum(t for _, t in bad), 2), "fewest_workers_alive": min(alive),
            "peak_worker_rss_mb": {pid: round(mb) for pid, mb in peak.items()},
            "requeue_logged": "requeued" in logged or "quarantined" in logged}


def _png_6000() -> str:
    from PIL import Image

    out = io.BytesIO()
    Image.new("1", (6000, 6000)).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


def main() -> None:
    """Start the stack, run each attack, print one JSON line per attack."""
    argparse.ArgumentParser(description=__doc__).parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    paths = {QA: model_factory.build_question_answering(root / "qa", positions=512),
             NLI: model_factory.build_zero_shot_classifier(root / "nli"),
             MLM: model_factory.build_masked_lm(root / "mlm")}
    # Issue 35's upload burst meets a 200 KB quota; a client that reads nothing is cut after 5 s.
    with Stack.started(extra_env={"HOSTING_FILE_STORAGE_BYTES": str(200 * 1024), "HOSTING_WRITE_TIMEOUT_S": "5"}
                       ) as stack:
        stack.manage("register_model", QA, "--source", str(paths[QA]), "--task", "question-answering")
        stack.manage("register_model", EMBED, "--source", str(model_factory.minilm_path()), "--task",
                     "feature-extraction", "--pooling", "mean", "--timeout", "60")
        stack.manage("register_model", NLI, "--source", str(paths[NLI]), "--task", "zero-shot-classification")
        stack.manage("register_model", MLM, "--source", str(paths[MLM]), "--task", "fill-mask")
        stack.manage("register_model", "vit", "--source", str(model_factory_vit(root)), "--task",
                     "image-classification")
        stack.create_token("all")
        stack.start_worker()
        stack.start_worker()
        stack.start_web()
        stack.wait_ready([QA, EMBED, NLI, MLM, "vit"], timeout_s=600)
        text = "word " * 200_000
        attacks = {
            "zero-shot template {{}}{:>10000000}": lambda: _post(stack, NLI, {
                "inputs": "the cat sat", "parameters": {"candidate_labels": ["a", "b"],
                                                        "hypothesis_template": "{{}}{:>10000000}"}}),
            "four concurrent 1 MB embedding texts": lambda: _concurrently(lambda: _post(stack, EMBED, {"inputs": text}), 4),
            "fill-mask [MASK] x 500, top_k 100": lambda: _post(stack, MLM, {"inputs": "[MASK] " * 500,
                                                                            "parameters": {"top_k": 100}}),
            "fill-mask 32 inputs of 30 masks, top_k 100": lambda: _post(stack, MLM, {
                "inputs": ["[MASK] " * 30] * 32, "parameters": {"top_k": 100}}),
            "fill-mask 1 input of 30 masks, top_k 100 (under the budget)": lambda: _post(stack, MLM, {
                "inputs": "[MASK] " * 30, "parameters": {"top_k": 100}}),
            "twenty base64 6000x6000 PNGs": lambda: _post(stack, "vit", {"inputs": [_png_6000()] * 20}),
            **round_four(stack),
        }
        for name, attack in attacks.items():
            print(json.dumps(_measure(stack, name, attack)), flush=True)


def round_four(stack: Stack) -> dict[str, Any]:
    """Issue 35's attacks: the web's tokenizer, the upload quota, the operator's reload, the server's bounds."""
    from tests.integration.test_request_limits import exchange

    address = ("127.0.0.1", stack.web[0][1])
    token = stack.tokens["all"]
    text = "word " * 200_000

    def tokenize() -> tuple[int, int, float]:
        started = time.perf_counter()
        status, _, answer = http_json("POST", f"{stack.url}/tokenize", {"model": EMBED, "inputs": text}, token=token)
        return status, len(json.dumps(answer).encode()), time.perf_counter() - started

    def upload() -> int:
        import httpx

        lines = b"".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": f"/models/{EMBED}",
                                     "body": {"inputs": f"text {i}"}}).encode() + b"\n" for i in range(700))
        content = lines[: lines.rfind(b"\n", 0, 49 * 1024) + 1]
        return httpx.post(f"{stack.url}/v1/files", headers={"Authorization": f"Bearer {token}"}, timeout=60,
                          files={"file": ("in.jsonl", content)}, data={"purpose": "batch"}).status_code

    def stalled_reader() -> tuple[int, float]:
        import socket

        body = json.dumps({"model": EMBED, "inputs": ["word " * 600] * 256}).encode()
        started = time.perf_counter()
        with socket.socket() as conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.connect(address)
            conn.sendall(f"POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
            time.sleep(8)  # reads nothing
            conn.settimeout(30)
            got = 0
            try:
                while chunk := conn.recv(1 << 20):
                    got += len(chunk)
            except (ConnectionResetError, TimeoutError):
                pass
        return got, round(time.perf_counter() - started, 1)

    return {
        "eight concurrent 1 MB /tokenize texts": lambda: _concurrently(tokenize, 8),
        "sixteen concurrent 49 KB uploads, 200 KB quota": lambda: sorted(_concurrently(upload, 16)),
        "Load now of minilm (register_model --reload)": lambda: stack.manage("register_model", EMBED, "--reload"),
        "a client that reads nothing of a 7 MB answer": stalled_reader,
        "a declared 60 MB body": lambda: exchange(address, f"POST /models/{EMBED} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                                           f"Content-Length: {60 * 2**20}\r\n\r\n".encode(),
                                                  body_bytes=60 * 2**20)[::2],
        "one 70 KB header": lambda: exchange(address, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: "
                                             + b"a" * 70 * 1024 + b"\r\n\r\n")[0],
    }


def model_factory_vit(root: Path) -> Path:
    """A tiny ViT image classifier (tests/media_factory)."""
    from tests import media_factory

    return media_factory.build_vit_classifier(root / "vit")


def _concurrently(call: Any, count: int) -> list[Any]:
    answers: list[Any] = [None] * count
    threads = [threading.Thread(target=lambda i=i: answers.__setitem__(i, call())) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


if __name__ == "__main__":
    main()
