"""A LitServe peer for the tiny-model overhead run: mean-pooled, normalised embeddings of a local BERT.

Run inside the LitServe venv (bench/peer_litserve.py makes it): `python litserve_server.py MODEL_DIR PORT`.
It answers `POST /predict` with `{"inputs": "<text>"}` by `{"embedding": [...]}`, batching up to
32 requests with a 5 ms window, as the product is configured in the same run.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import litserve as ls
import torch
from transformers import AutoModel, AutoTokenizer

MAX_BATCH = 32
BATCH_TIMEOUT_S = 0.005


class Embedder(ls.LitAPI):
    """Tokenize, forward, mean-pool over the attention mask, L2-normalise."""

    def setup(self, device: str) -> None:
        """Load the model once per worker."""
        torch.set_num_threads(1)
        model_dir = os.environ["LITSERVE_MODEL_DIR"]  # its workers are spawned: no globals from __main__
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModel.from_pretrained(model_dir).eval()

    def decode_request(self, request):  # type: ignore[no-untyped-def]  # LitServe reads the annotation as the body's type
        """The text to embed."""
        return request["inputs"]

    def batch(self, inputs: list[str]) -> list[str]:
        """A batch is the list of texts."""
        return inputs

    def predict(self, texts: list[str]) -> list[list[float]]:
        """One normalised vector per text."""
        encoded = self.tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
        with torch.inference_mode():
            hidden = self.model(**encoded).last_hidden_state
        mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, p=2, dim=1).tolist()

    def unbatch(self, output: list[list[float]]) -> list[list[float]]:
        """Each request's own vector."""
        return output

    def encode_response(self, output: list[float]) -> dict[str, Any]:
        """The JSON answer."""
        return {"embedding": output}


if __name__ == "__main__":
    os.environ["LITSERVE_MODEL_DIR"], port = sys.argv[1], int(sys.argv[2])
    api = Embedder(max_batch_size=MAX_BATCH, batch_timeout=BATCH_TIMEOUT_S)
    server = ls.LitServer(api, accelerator="cpu", workers_per_device=1, timeout=60)
    server.run(port=port, host="127.0.0.1", log_level="warning", generate_client_file=False)  # no access log, as ours
