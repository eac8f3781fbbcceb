"""The worker's float32 bytes reach the client bit-exact: as JSON numbers (orjson's numpy path) and as base64."""

from __future__ import annotations

import base64

import msgpack
import numpy as np
import orjson

from models_registry.api.pipeline.answer import dump_json
from models_registry.api.openai.openai_routes import _embedding
from models_registry.api.hf.payloads import shape_response


def _vectors() -> np.ndarray:
    rng = np.random.default_rng(26)
    vectors = rng.standard_normal((5, 384)).astype("<f4")
    vectors[0, :4] = [np.float32(1e-40), -np.float32(3.4e38), np.float32(1.0) / 3, -0.0]  # subnormal, huge, thirds
    return vectors


def _worker_outputs(vectors: np.ndarray) -> list[list]:
    """What the worker sends (inference.embeddings), through msgpack as the channel layer carries it."""
    outputs = [[row.tobytes(), [row.shape[0]]] for row in vectors]
    return msgpack.unpackb(msgpack.packb(outputs, use_bin_type=True), raw=False)


def test_json_numbers_parse_back_to_the_same_float32_bits() -> None:
    vectors = _vectors()
    body = dump_json(shape_response("feature-extraction", _worker_outputs(vectors), is_batch=True))
    parsed = np.asarray(orjson.loads(body), dtype=np.float64).astype("<f4")
    assert parsed.tobytes() == vectors.tobytes()
    single = dump_json(shape_response("feature-extraction", _worker_outputs(vectors[:1]), is_batch=False))
    assert np.asarray(orjson.loads(single), dtype="<f4").tobytes() == vectors[0].tobytes()


def test_base64_carries_the_worker_bytes_as_they_are() -> None:
    vectors = _vectors()
    for index, output in enumerate(_worker_outputs(vectors)):
        entry = _embedding(index, output, "base64")
        assert entry["index"] == index
        assert base64.b64decode(entry["embedding"]) == vectors[index].tobytes()
        floats = orjson.loads(dump_json(_embedding(index, output, "float")))["embedding"]
        assert np.asarray(floats, dtype=np.float64).astype("<f4").tobytes() == vectors[index].tobytes()
