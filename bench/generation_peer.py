"""The peer of `make bench-generation`: `transformers serve --continuous-batching`, in a venv of its own.

Its serving extras (requirements-bench-generation.txt) go into bench-results/transformers-serve/venv
over the product venv's torch, transformers, uvicorn and openai; a peer that cannot be installed or
started is skipped with the reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import httpx

from bench.comparison import _free_port

ROOT = Path(__file__).resolve().parent.parent
SERVE_HOME = ROOT / "bench-results" / "transformers-serve"
REQUIREMENTS = ROOT / "requirements-bench-generation.txt"
CB_BLOCKS = 320  # 10,240 KV tokens for transformers serve (~750 MB); its default takes half the machine's memory


class Server:
    """One server under test: where to send requests and the model id it knows."""

    def __init__(self, name: str, url: str, model: str, headers: dict[str, str]) -> None:
        self.name, self.url, self.model, self.headers = name, url, model, headers


def install_serve() -> tuple[Path | None, str]:
    """(python of a venv that runs `transformers serve`, "") or (None, why not); torch etc. from our venv."""
    venv, log = SERVE_HOME / "venv", SERVE_HOME / "setup.log"
    stamp = venv / ".installed"
    if not stamp.is_file():
        SERVE_HOME.mkdir(parents=True, exist_ok=True)
        print(f"installing transformers serve's extras into {venv} (once; log: {log}) ...", flush=True)
        with open(log, "ab") as out:
            if subprocess.run([sys.executable, "-m", "venv", str(venv)], stdout=out, stderr=out).returncode:
                return None, f"could not create a venv (see {log})"
            site = Path(subprocess.check_output([str(venv / "bin" / "python"), "-c",
                                                 "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                                text=True).strip())
            # Our torch and transformers first on its path, so pip adds only what serving lacks.
            (site / "zz_product_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
            pip = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "-r", str(REQUIREMENTS)],
                                 stdout=out, stderr=out, timeout=900)
        if pip.returncode:
            return None, f"pip could not install {REQUIREMENTS.name} (see {log})"
        stamp.touch()
    return venv / "bin" / "python", ""


def start_serve(model_dir: Path, threads: int, log_dir: Path, device: str = "cpu", python: Path | None = None,
                extra: list[str] | None = None,
                blocks: int = CB_BLOCKS) -> tuple[subprocess.Popen[bytes] | None, Server | None, str]:
    """`transformers serve --continuous-batching` on loopback, or why not.

    python: one that already imports its extras (an offline GPU machine); else its own venv is made.
    """
    if python is None:
        python, why = install_serve()
        if python is None:
            return None, None, why
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    log = open(log_dir / "transformers-serve.log", "ab")  # noqa: SIM115 - open while the server runs
    process = subprocess.Popen([str(python), "-m", "transformers.cli.transformers", "serve", str(model_dir),
                                "--continuous-batching", "--host", "127.0.0.1", "--port", str(port), "--device",
                                device, "--cb-block-size", "32", "--cb-num-blocks", str(blocks), *(extra or [])],
                               env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    why = wait_ready(process, port, log_dir / "transformers-serve.log", 180)
    if why:
        return None, None, why
    return process, Server("transformers-serve", f"http://127.0.0.1:{port}", str(model_dir), {}), ""


def wait_ready(process: subprocess.Popen[bytes], port: int, log: Path, timeout_s: float) -> str:
    """"" once the peer on port answers /health with 200, else why not (its process group ended)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if process.poll() is not None:
            stop(process)  # what it started (vLLM's engine core) may outlive it in its group
            return f"it exited with {process.returncode} (see {log})"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return ""
        except httpx.HTTPError:
            pass
        time.sleep(1)
    stop(process)
    return f"it did not answer /health within {timeout_s:g} s (see {log})"


def stop(process: subprocess.Popen[bytes], grace_s: float = 30) -> None:
    """End a peer started in a session of its own: its whole process group, SIGTERM then SIGKILL."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(grace_s)
    except ProcessLookupError:
        pass
