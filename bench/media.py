"""`python -m bench.media` (`make bench-media`): images and audio clips per second through HTTP vs in-process.

Builds the tiny random-weight ViT classifier, CLIP and Wav2Vec2 audio classifier of the
tests (and a random ViT-S/16-shaped classifier, whose compute dominates the route's cost), starts the product on loopback (one uvicorn, one worker), and for each model:

- HTTP: closed-loop clients posting the raw file (`image/png`, `audio/wav`) at each
  concurrency; every answer must be a 200;
- the in-process ceiling, in a spawned process with the worker's torch settings: the same
  files decoded (media.opening), preprocessed and run through the worker's own runner in
  batches of the task's max_batch_size, back to back;
- the web process' CPU per request, against a text request with an answer of the same
  size (a tiny text classifier with the same three labels): the web never decodes, so an
  image costs it only the bytes it reads and hands on.

Short windows, bounded request counts; the table goes to stdout and bench-results/media.md.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import loadgen  # noqa: E402
from bench.procstat import CpuMeter  # noqa: E402

LABELS = ("cat", "dog", "bird")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m bench.media", description=__doc__)
    parser.add_argument("--levels", default="8,32,64", help="client concurrencies")
    parser.add_argument("--audio-levels", default="8,32")
    parser.add_argument("--small-levels", default="8,32", help="for the ViT-S/16-shaped model")
    parser.add_argument("--small-seconds", type=float, default=12.0, help="its window (a few images a second)")
    parser.add_argument("--seconds", type=float, default=4.0, help="measurement window per level")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--max-requests", type=int, default=3000, help="per level")
    parser.add_argument("--batch", type=int, default=32, help="max_batch_size of every task")
    parser.add_argument("--size", type=int, default=224, help="the images' side in pixels")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="of the worker and of the ceiling (make run's layout: 1 per worker; on a shared, "
                             "oversubscribed CPU two threads per forward were 10-30x slower)")
    parser.add_argument("--out", default=str(ROOT / "bench-results"))
    return parser.parse_args(argv)


def images(count: int, side: int) -> list[bytes]:
    """count different JPEG photos-to-be of side x side pixels: noise under drawn shapes (real photos do not
    compress to a few hundred bytes, and decoding them is part of the cost)."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(3)
    out = []
    for _ in range(count):
        noise = rng.integers(0, 255, (side, side, 3), dtype=np.uint8)
        image = Image.fromarray(noise).filter(ImageFilter.GaussianBlur(1.5))
        draw = ImageDraw.Draw(image)
        for _ in range(6):
            x, y = (int(v) for v in rng.integers(0, side - 20, 2))
            draw.ellipse((x, y, x + 20 + int(rng.integers(0, side // 3)), y + 20 + int(rng.integers(0, side // 3))),
                         fill=tuple(int(v) for v in rng.integers(0, 255, 3)))
        buffer = io.BytesIO()
        image.save(buffer, format="JPEG", quality=85)
        out.append(buffer.getvalue())
    return out


def clips(count: int) -> list[bytes]:
    """count one-second 16 kHz WAV tones of different pitches."""
    from tests.media_factory import tone

    return [tone(1.0, frequency=220.0 + 40 * i) for i in range(count)]


# --- the in-process ceiling (a spawned process) -----------------------------------------------------


def _ceiling(source: str, task_kind: str, files: list[bytes], batch: int, seconds: float, threads: int
             ) -> tuple[float, float]:
    """(items per second, CPU ms per item): decode, preprocess and forward in batches with the worker's runner."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hosting.settings")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import django

    django.setup()
    from concurrent.futures import Future

    from models_registry.core.batch_types import BatchPolicy
    from models_registry.inference.model_runner import PipelineRunner
    from models_registry.media import envelope
    from models_registry.media.opening import open_item
    from models_registry.media.pending import PendingMedia
    from models_registry.catalog.specs import ModelSpec, TaskSpec

    task = TaskSpec(name=task_kind, task=task_kind, parameters={}, pooling="mean", normalize=True,
                    policy=BatchPolicy(max_batch_size=batch), timeout_s=60)
    spec = ModelSpec(name="m", source=source, revision="", device="cpu", dtype="auto", enabled=True,
                     tasks={task_kind: task}, default_task=task_kind)
    runner = PipelineRunner(torch_threads=threads)
    loaded = runner.load(spec)
    kind = "audio" if task_kind.startswith(("audio", "automatic")) else "image"
    items = [envelope.probe(data, kind, "x", 10**9, 3600) for data in files]

    def one_batch(start: int) -> None:
        chosen = [items[(start + k) % len(items)] for k in range(batch)]
        pending = []
        for item in chosen:  # decoded here, in the timed loop: the ceiling pays for decoding too
            future: Future[Any] = Future()
            future.set_result(open_item(item, loaded.media_costs.sampling_rate, 10**9, 3600))
            pending.append(PendingMedia(item, future))
        outputs = runner.run(loaded, task, pending, [{}] * batch)
        assert not any(type(o).__name__ == "ItemFailure" for o in outputs), outputs[:1]

    one_batch(0)  # warm-up
    done, started, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - started < seconds:
        one_batch(done)
        done += batch
    return done / (time.perf_counter() - started), 1000 * (time.process_time() - cpu) / done


def ceiling(source: Path, task_kind: str, files: list[bytes], batch: int, threads: int, seconds: float = 4.0
            ) -> tuple[float, float]:
    """_ceiling in a fresh spawned process (the load client never holds torch)."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(_ceiling, str(source), task_kind, files, batch, seconds, threads).result()


# --- HTTP ---------------------------------------------------------------------------------------------


def raw_requests(url: str, path: str, token: str, files: list[bytes], content_type: str) -> list[bytes]:
    """Pre-built POSTs of each file as the body (InferenceClient's way with no parameters)."""
    from urllib.parse import urlsplit

    host = urlsplit(url).netloc
    return [(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: keep-alive\r\nAuthorization: Bearer {token}\r\n"
             f"Content-Type: {content_type}\r\nContent-Length: {len(data)}\r\n\r\n").encode() + data for data in files]


def json_requests(url: str, path: str, token: str, texts: list[str]) -> list[bytes]:
    """Pre-built JSON POSTs, one text each."""
    return [loadgen.build_request("POST", url, path, json.dumps({"inputs": t}).encode(), token) for t in texts]


def level(url: str, requests: list[bytes], concurrency: int, args: argparse.Namespace, meter: CpuMeter,
          seconds: float | None = None) -> dict[str, Any]:
    """One closed-loop level: items/s, latency, errors, CPU ms per request of the web and the worker."""
    result, answers = asyncio.run(loadgen.run_level(
        [url], {url: requests}, concurrency, args.warmup, seconds or args.seconds, args.max_requests,
        on_window=lambda which: meter.mark(which)))
    cpu = meter.between("start", "end")
    bad = [a for a in answers if a[1] != 200]
    done = max(result.completed, 1)
    lat = sorted(result.latencies_ms)
    return {"concurrency": concurrency, "rate": result.completed / max(result.window_s, 1e-9),
            "p50_ms": loadgen.percentile(lat, 50) if lat else 0.0, "p99_ms": loadgen.percentile(lat, 99) if lat else 0.0,
            "errors": len(bad) + result.errors, "sample_error": bad[0][3][:200].decode(errors="replace") if bad else "",
            "web_cpu_ms": 1000 * cpu["web"] / done, "worker_cpu_ms": 1000 * cpu["worker"] / done,
            "redis_cpu_ms": 1000 * cpu["redis"] / done,
            "other_cores": cpu["other"] / max(result.window_s, 1e-9)}


def main(argv: list[str] | None = None) -> int:
    """Build, start, measure, print."""
    args = parse_args(argv)
    from tests import media_factory, model_factory
    from tests.stack import Stack

    levels = [int(v) for v in args.levels.split(",")]
    audio_levels = [int(v) for v in args.audio_levels.split(",")]
    small_levels = [int(v) for v in args.small_levels.split(",")]
    root = Path(tempfile.mkdtemp(prefix="bench-media-"))
    paths = {"vit": media_factory.build_vit_classifier(root / "vit", LABELS),
             "vit-small": media_factory.build_vit_classifier(root / "vit-small", LABELS, media_factory.VIT_SMALL),
             "clip": media_factory.build_tiny_clip(root / "clip"),
             "audio": media_factory.build_audio_classifier(root / "audio", LABELS),
             "text": model_factory.build_sequence_classifier(root / "text", LABELS)}
    pictures, sounds = images(64, args.size), clips(16)
    print(f"{len(pictures)} JPEGs of {args.size}x{args.size} ({sum(map(len, pictures)) // len(pictures)} bytes each), "
          f"{len(sounds)} one-second WAVs; batch {args.batch}", flush=True)
    jobs = {"vit": ("image-classification", pictures), "vit-small": ("image-classification", pictures),
            "clip": ("image-feature-extraction", pictures),
            "audio": ("audio-classification", sounds)}

    def measure_ceilings() -> dict[str, tuple[float, float]]:
        found = {name: ceiling(paths[name], kind, files, args.batch, args.torch_threads)
                 for name, (kind, files) in jobs.items()}
        print("in-process ceilings (items/s, CPU ms/item): "
              + ", ".join(f"{k} {v[0]:.0f} {v[1]:.2f}" for k, v in found.items()), flush=True)
        return found

    # Measured before and after the HTTP levels: on a shared machine the free CPU drifts, and the
    # better of the two is the ceiling each HTTP figure is compared with.
    before = measure_ceilings()
    rows: list[dict[str, Any]] = []
    batch = ["--max-batch-size", str(args.batch), "--max-batch-delay-ms", "5", "--max-queue-size", "1024",
             "--timeout", "60"]
    registrations = [["vit", "image-classification", None], ["vit-small", "image-classification", None],
                     ["clip", "image-feature-extraction", "image"],
                     ["audio", "audio-classification", None], ["text", "text-classification", None]]
    calls = [["register_model", name, "--source", str(paths[name]), "--task", task,
              *(["--task-name", task_name] if task_name else []), *batch] for name, task, task_name in registrations]
    with Stack.started(extra_env={"HOSTING_TORCH_THREADS": str(args.torch_threads)}) as stack:
        stack.manage("shell", "-c", "from django.core.management import call_command\n"
                                    f"for a in {json.dumps(calls)}:\n    call_command(*a)\n")
        token = stack.create_token("all")
        worker = stack.start_worker()
        url = stack.start_web()
        stack.wait_ready(["vit", "vit-small", "clip", "audio", "text"])
        meter = CpuMeter({"web": [stack.web[0][0].pid], "worker": [worker.pid],
                          "redis": [stack.redis.process.pid] if stack.redis else []})
        plans = [("vit", "/models/vit", raw_requests(url, "/models/vit", token, pictures, "image/jpeg"), levels),
                 ("vit-small", "/models/vit-small",
                  raw_requests(url, "/models/vit-small", token, pictures, "image/jpeg"), small_levels),
                 ("clip", "/models/clip/image", raw_requests(url, "/models/clip/image", token, pictures, "image/jpeg"),
                  levels),
                 ("audio", "/models/audio", raw_requests(url, "/models/audio", token, sounds, "audio/wav"),
                  audio_levels)]
        for name, path, requests, concurrencies in plans:
            for concurrency in concurrencies:
                window = args.small_seconds if name == "vit-small" else args.seconds
                rows.append({"model": name, "route": path, **level(url, requests, concurrency, args, meter, window)})
                print(f"{name} at {concurrency} clients: {rows[-1]['rate']:.0f} items/s, {rows[-1]['errors']} errors", flush=True)
        texts = [f"picture number {i} shows a small animal" for i in range(64)]
        text_row = {"model": "text", "route": "/models/text",
                    **level(url, json_requests(url, "/models/text", token, texts), 32, args, meter)}
        rows.append(text_row)
    after = measure_ceilings()
    ceilings = {name: max(before[name], after[name]) for name in jobs}
    for row in rows:
        best = ceilings.get(row["model"], (0.0, 0.0))
        row["ceiling"], row["ceiling_cpu_ms"] = best
        row["ratio"] = row["rate"] / best[0] if best[0] else 0.0
    image_web = next(r["web_cpu_ms"] for r in rows if r["model"] == "vit" and r["concurrency"] == 32)
    summary = (f"web CPU per request at 32 clients: image (vit, raw JPEG) {image_web:.2f} ms vs text (same 3-label "
               f"answer) {text_row['web_cpu_ms']:.2f} ms = {image_web / max(text_row['web_cpu_ms'], 1e-9):.2f}x")
    report = "\n".join([_table(rows), "", summary])
    print("\n" + report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "media.md").write_text(report + "\n")
    (out / "media.json").write_text(json.dumps({"rows": rows, "ceilings_before": before, "ceilings_after": after},
                                               indent=1))
    return 0


def _row(row: dict[str, Any]) -> str:
    ratio = f"{row['ratio']:.2f}x" if row["ceiling"] else "-"
    ceiling_text = f"{row['ceiling']:.0f} ({row['ceiling_cpu_ms']:.2f})" if row["ceiling"] else "-"
    return (f"| {row['model']} | {row['route']} | {row['concurrency']} | {row['rate']:.0f} | {ceiling_text} | {ratio} | "
            f"{row['p50_ms']:.1f} / {row['p99_ms']:.1f} | {row['web_cpu_ms']:.2f} / {row['worker_cpu_ms']:.2f} / "
            f"{row['redis_cpu_ms']:.2f} | {row['errors']} | {row['other_cores']:.2f} |")


def _table(rows: list[dict[str, Any]]) -> str:
    head = ("| model | route | clients | items/s (HTTP) | in-process ceiling items/s (CPU ms/item) | HTTP / ceiling | "
            "p50 / p99 ms | CPU ms/req web / worker / redis | errors | other cores busy |\n"
            "|---|---|---|---|---|---|---|---|---|---|")
    return "\n".join([head, *(_row(r) for r in rows)])


if __name__ == "__main__":
    raise SystemExit(main())
