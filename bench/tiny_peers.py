"""The peers of the tiny-model overhead run: Infinity (torch engine) and LitServe, each in its own venv.

A peer that cannot be installed or started is skipped with the reason; the bench never fails for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import loadgen, peers

ROOT = Path(__file__).resolve().parent.parent
LITSERVE_HOME = ROOT / "bench-results" / "litserve"
LITSERVE_VERSION = "0.2.19"


@dataclass(frozen=True)
class Peer:
    """How to start one peer server and talk to it."""

    name: str
    command: list[str]
    cwd: Path
    env: dict[str, str]
    path: str  # the inference route
    shape: str  # "openai" or "litserve"

    def requests(self, url: str, sentences: list[str]) -> list[bytes]:
        """One POST per sentence in the peer's own request shape."""
        if self.shape == "openai":
            return peers.requests_for(url, sentences)
        return [loadgen.build_request("POST", url, self.path, json.dumps({"inputs": s}).encode()) for s in sentences]

    def vector_of(self, body: bytes) -> Any:
        """The embedding in the peer's answer."""
        return peers.vector_of(body) if self.shape == "openai" else json.loads(body)["embedding"]


def _install_litserve() -> tuple[Path | None, str]:
    """(the LitServe venv's python, "") once installed; its torch and transformers are the product venv's."""
    venv, log = LITSERVE_HOME / "venv", LITSERVE_HOME / "setup.log"
    stamp = venv / f".litserve-{LITSERVE_VERSION}"
    if not stamp.is_file():
        LITSERVE_HOME.mkdir(parents=True, exist_ok=True)
        print(f"installing LitServe {LITSERVE_VERSION} into {venv} (once; log: {log}) ...", flush=True)
        with open(log, "ab") as out:
            ok = subprocess.run([sys.executable, "-m", "venv", str(venv)], stdout=out, stderr=out).returncode == 0 and \
                subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", f"litserve=={LITSERVE_VERSION}"],
                               stdout=out, stderr=out, timeout=900).returncode == 0
        if not ok:
            return None, f"pip could not install litserve {LITSERVE_VERSION} (see {log})"
        # torch and transformers from the product's venv, after LitServe's own packages on sys.path.
        site = Path(subprocess.check_output([str(venv / "bin" / "python"), "-c",
                                             "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip())
        (site / "zz_product_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        stamp.touch()
    return venv / "bin" / "python", ""


def available(model_dir: Path, port_of: Any) -> tuple[list[Peer], dict[str, str]]:
    """The peers that could be installed, and {name: why skipped} for the others."""
    found: list[Peer] = []
    skipped: dict[str, str] = {}
    bin_dir, why = peers.install()
    if bin_dir is None:
        skipped["infinity-torch"] = why
    else:
        found.append(Peer(
            "infinity-torch",
            [str(bin_dir / "infinity_emb"), "v2", "--model-id", str(model_dir), "--engine", "torch",
             "--served-model-name", peers.SERVED_NAME, "--pooling-method", "mean", "--batch-size", "32",
             "--host", "127.0.0.1", "--port", str(port_of()), "--log-level", "warning"],
            model_dir, peers._env(), "/embeddings", "openai"))
    python, why = _install_litserve()
    if python is None:
        skipped["litserve"] = why
    else:
        found.append(Peer("litserve", [str(python), str(ROOT / "bench" / "litserve_server.py"), str(model_dir),
                                       str(port_of())], ROOT, {**peers._env(), "OMP_NUM_THREADS": "1"},
                          "/predict", "litserve"))
    return found, skipped


@contextmanager
def running(peer: Peer, log_dir: Path) -> Iterator[tuple[str, int]]:
    """The peer serving on loopback: (base URL, pid); stopped (its whole group) on exit."""
    port = peer.command[peer.command.index("--port") + 1] if "--port" in peer.command else peer.command[-1]
    url = f"http://127.0.0.1:{port}"
    with open(log_dir / f"{peer.name}.log", "ab") as log:
        process = subprocess.Popen(peer.command, cwd=peer.cwd, env=peer.env, stdout=log, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            peers.wait_until_healthy(url, process, peer.name, log_dir / f"{peer.name}.log", poll_s=0.5)
            yield url, process.pid
        finally:
            try:
                os.killpg(process.pid, 15)  # its own session: the server and the workers it spawned
                process.wait(20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(process.pid, 9)
                except ProcessLookupError:
                    pass
