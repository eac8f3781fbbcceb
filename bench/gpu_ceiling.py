"""`make bench-gpu`'s in-process side: the MiniLM-shaped model, its reference vectors, the ceilings, GPU sampling.

The ceilings are what the product could reach on this device if serving cost nothing:
tokenize + forward + pool in length-sorted batches, the forward alone with its inputs
already on the device (float32 and half precision), and the fast tokenizer on one thread
and in one batch call (issue 26's "Measured on a GPU" table).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np


def build_model(dest: Path) -> Path:
    """all-MiniLM-L6-v2's shape with random weights and its real tokenizer in dest.

    The tokenizer comes from HOSTING_BENCH_TOKENIZER_DIR where set (bench/gpu_run.sh: the
    files bench/gpu_wheels.sh copied), else from the bundled demo model.
    """
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from tests.model_factory import MINILM_SHAPE, minilm_path

    if (dest / "config.json").is_file():
        return dest
    tokenizer = AutoTokenizer.from_pretrained(os.environ.get("HOSTING_BENCH_TOKENIZER_DIR") or str(minilm_path()))
    tokenizer.model_max_length = MINILM_SHAPE["max_position_embeddings"]
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, **MINILM_SHAPE)).eval()
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(dest))
    model.save_pretrained(str(dest))
    return dest


def _load(model_dir: Path, device: str) -> tuple[Any, Any]:
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModel.from_pretrained(str(model_dir)).to(device).eval()
    return tokenizer, model


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _pool(model: Any, encoded: dict[str, Any]) -> Any:
    import torch

    hidden = model(**encoded).last_hidden_state
    mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return torch.nn.functional.normalize(((hidden * mask).sum(1) / mask.sum(1)).float(), dim=1)


def measure(model_dir: Path, sentences: list[str], device: str, seconds: float = 3.0,
            batch: int = 256, forward_batch: int = 1024) -> tuple[np.ndarray, dict[str, Any]]:
    """The reference vectors (float32, every sentence) and the in-process ceilings in sentences/s."""
    import torch

    tokenizer, model = _load(model_dir, device)
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    reference = np.zeros((len(sentences), model.config.hidden_size), dtype=np.float32)
    figures: dict[str, Any] = {"device": device, "torch": torch.__version__}

    def end_to_end() -> int:
        with torch.inference_mode():
            for start in range(0, len(order), batch):
                idx = order[start:start + batch]
                encoded = tokenizer([sentences[i] for i in idx], truncation=True, padding=True, return_tensors="pt")
                vectors = _pool(model, {k: v.to(device) for k, v in encoded.items()})
                reference[idx] = vectors.cpu().numpy()
        return len(order)

    figures["tokenize_forward_pool_fp32"] = _rate(end_to_end, seconds, device)
    chunks = [order[s:s + forward_batch] for s in range(0, len(order), forward_batch)]
    on_device = [{k: v.to(device) for k, v in tokenizer([sentences[i] for i in idx], truncation=True, padding=True,
                                                        return_tensors="pt").items()} for idx in chunks]
    half = torch.float16 if device.startswith("cuda") else torch.bfloat16
    for label, dtype in (("fp32", torch.float32), ("fp16" if half == torch.float16 else "bf16", half)):
        typed = model.to(dtype)

        def forward_only(typed: Any = typed) -> int:
            with torch.inference_mode():
                for encoded in on_device:
                    _pool(typed, encoded)
            return len(order)

        figures[f"forward_pool_{label}"] = _rate(forward_only, seconds, device)
    model.to(torch.float32)
    backend = tokenizer.backend_tokenizer
    figures["tokenizer_one_thread"] = _rate(lambda: sum(1 for s in sentences if backend.encode(s)), seconds, device)
    figures["tokenizer_batch_call"] = _rate(lambda: len(backend.encode_batch(sentences)), seconds, device)
    single = [sentences[i] for i in range(0, len(sentences), max(1, len(sentences) // 200))]
    latencies = []
    with torch.inference_mode():
        for text in single:
            t0 = time.perf_counter()
            encoded = tokenizer([text], truncation=True, return_tensors="pt")
            _pool(model, {k: v.to(device) for k, v in encoded.items()}).cpu()
            latencies.append((time.perf_counter() - t0) * 1000)
    figures["single_sentence_p50_ms"] = round(float(np.median(latencies)), 2)
    on_device.clear()
    return reference, figures


def release(device: str) -> None:
    """Hand the ceilings' cached device memory back before the product's workers load (after measure returned)."""
    import gc

    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def _rate(run: Any, seconds: float, device: str) -> float:
    """Sentences per second of run (which returns how many it did), after one warm-up call."""
    run()
    _sync(device)
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        done += run()
    _sync(device)
    return round(done / (time.perf_counter() - start), 1)


class GpuSampler:
    """GPU busy % sampled every interval (pynvml, else nvidia-smi); 'n/a' where there is no NVIDIA GPU."""

    def __init__(self, device: str, interval_s: float = 0.2) -> None:
        self.device, self.interval_s = device, interval_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._read = self._reader() if device.startswith("cuda") else None

    def _reader(self) -> Any:
        index = int(self.device.partition(":")[2] or 0)
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return lambda: float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:  # noqa: BLE001 - no pynvml: nvidia-smi, or nothing
            if shutil.which("nvidia-smi") is None:
                return None
            command = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-i", str(index)]
            return lambda: float(subprocess.run(command, capture_output=True, text=True, timeout=5).stdout.split()[0])

    def start(self) -> None:
        """Sample until stop()."""
        if self._read is None:
            return
        self.samples, self._stop = [], threading.Event()

        def loop() -> None:
            while not self._stop.wait(self.interval_s):
                try:
                    self.samples.append(self._read())
                except Exception:  # noqa: BLE001 - a failed sample is left out
                    pass

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> str:
        """The window's GPU busy: 'median% (min-max%)', or 'n/a'."""
        if self._thread is None:
            return "n/a"
        self._stop.set()
        self._thread.join()
        self._thread = None
        if not self.samples:
            return "n/a"
        return f"{np.median(self.samples):.0f}% ({min(self.samples):.0f}-{max(self.samples):.0f}%)"
