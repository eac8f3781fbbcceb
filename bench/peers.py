"""Peers measured in the same bench run: Infinity, both engines (torch, and optimum on ONNX Runtime).

Infinity pins numpy<2 and transformers<5, so it lives in a venv of its own under
bench-results/, installed on first use with the CPU torch wheel found on this machine (never
PyPI's CUDA build); its ONNX engine reads a model exported by its own optimum. A peer that
cannot be installed or started is skipped with the reason; the bench never fails for it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import loadgen

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "bench-results" / "infinity"
VERSION = "0.0.78"
SERVED_NAME = "minilm"
ENGINES = ("torch", "optimum")
# Beside the ONNX file: the torch engine's weights, and the pooling and normalisation settings both engines read.
PEER_FILES = ("model.safetensors", "1_Pooling", "modules.json", "sentence_bert_config.json",
              "config_sentence_transformers.json")


def _cpu_torch_wheel() -> Path | None:
    """The local CPU build of the project's torch (pip's find-links folders, or wheels/)."""
    folders = [Path(p) for p in os.environ.get("PIP_FIND_LINKS", "").split() if p] + [ROOT / "wheels"]
    for folder in folders:
        found = sorted(folder.glob("torch-2.13.0+cpu-*.whl")) if folder.is_dir() else []
        if found:
            return found[-1]
    return None


def _run(cmd: list[str], log: Path, timeout: float, cwd: Path | None = None, env: dict[str, str] | None = None) -> bool:
    with open(log, "ab") as out:
        try:
            return subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, cwd=cwd,
                                  env=env, check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False


def _env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(HOME / "hf-home"), "DO_NOT_TRACK": "1",
            "INFINITY_ANONYMOUS_USAGE_STATS": "0", "TOKENIZERS_PARALLELISM": "false"}


def install() -> tuple[Path | None, str]:
    """(the peer venv's bin folder, "") once Infinity is installed in its own venv; else (None, why not)."""
    venv, log = HOME / "venv", HOME / "setup.log"
    HOME.mkdir(parents=True, exist_ok=True)
    stamp = venv / f".infinity-{VERSION}"
    if not stamp.is_file():
        wheel = _cpu_torch_wheel()
        if wheel is None:
            return None, "no local CPU torch 2.13.0 wheel (PIP_FIND_LINKS or wheels/): would pull PyPI's CUDA torch"
        print(f"installing Infinity {VERSION} into {venv} (once; log: {log}) ...", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        ok = _run([sys.executable, "-m", "venv", str(venv)], log, 120) and _run(
            [str(venv / "bin" / "pip"), "install", "--quiet", str(wheel), f"infinity-emb[server,torch,optimum]=={VERSION}"],
            log, 1200)
        if not ok:
            return None, f"pip could not install infinity-emb {VERSION} (see {log})"
        stamp.touch()
    return venv / "bin", ""


def prepare(source: str) -> tuple[Path | None, str]:
    """(the peer venv's bin folder, "") once Infinity and its ONNX model are ready; else (None, why not)."""
    venv, model, log = HOME / "venv", HOME / "model", HOME / "setup.log"
    bin_dir, why_not = install()
    if bin_dir is None:
        return None, why_not
    if not (model / "model.onnx").is_file():
        print(f"exporting the peer's ONNX model with its optimum into {model} ...", flush=True)
        shutil.rmtree(model, ignore_errors=True)
        # transformers' outputs (last_hidden_state): what Infinity's optimum engine pools.
        if not _run([str(venv / "bin" / "optimum-cli"), "export", "onnx", "--model", source, "--task",
                     "feature-extraction", "--library-name", "transformers", str(model)], log, 600, env=_env()):
            return None, f"optimum-cli could not export the model for Infinity's ONNX engine (see {log})"
    for name in PEER_FILES:
        path = Path(source) / name
        if path.is_dir():
            shutil.copytree(path, model / name, dirs_exist_ok=True)
        elif path.is_file() and not (model / name).is_file():
            shutil.copy(path, model / name)
    return venv / "bin", ""


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def wait_until_healthy(url: str, process: subprocess.Popen[bytes], what: str, log: Path, poll_s: float = 1.0) -> None:
    """Poll url's /health until it answers 200; RuntimeError when the process exits first or 240 s pass."""
    deadline = time.time() + 240
    while not _healthy(url):
        if process.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"{what} did not start (see {log})")
        time.sleep(poll_s)


@contextmanager
def running(bin_dir: Path, engine: str, port: int) -> Iterator[tuple[str, int]]:
    """An Infinity server for one engine on 127.0.0.1:port: (base URL, pid); stopped on exit."""
    with open(HOME / f"server-{engine}.log", "ab") as log:
        yield from _serve(bin_dir, engine, port, log)


def _serve(bin_dir: Path, engine: str, port: int, log: Any) -> Iterator[tuple[str, int]]:
    model = HOME / "model"
    # The model as "." from inside its folder: Infinity 0.0.78 passes the ONNX file's path on as a
    # file name, which optimum only finds when it is relative to the model folder.
    process = subprocess.Popen(
        [str(bin_dir / "infinity_emb"), "v2", "--model-id", ".", "--engine", engine, "--served-model-name", SERVED_NAME,
         "--pooling-method", "mean",  # its default (auto) takes the first token with the ONNX engine
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=model, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, process, f"Infinity ({engine})", HOME / f"server-{engine}.log")
        yield url, process.pid
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()


def requests_for(url: str, sentences: list[str]) -> list[bytes]:
    """One OpenAI-shaped embeddings POST per sentence, as Infinity takes them."""
    return [loadgen.build_request("POST", url, "/embeddings", json.dumps({"model": SERVED_NAME, "input": [s]}).encode())
            for s in sentences]


def vector_of(body: bytes) -> Any:
    """The embedding in an OpenAI-shaped answer."""
    return json.loads(body)["data"][0]["embedding"]
