"""LoRA adapters through the real stack: an adapter's name on the HF route and /v1/embeddings answers peft's merged
adapter, a batch mixing the base and four adapters gives each row its own answer, and an ungranted adapter is
403 and unlisted."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from tests import adapter_layouts, hub_layouts
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration
pytest.importorskip("peft")

ADAPTERS = ("alpha", "beta", "gamma", "delta")
TEXTS = ["Which worker answers the queue?", "a short one", "the model server packs sentences into rows " * 3]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served-adapters")
    base = hub_layouts.build(hub_layouts.FAMILIES["mpnet"], root / "base")  # mean pooling and Normalize
    return {"base": base, **{name: adapter_layouts.build_adapter(base, root / name, seed=i + 1, r=2 + i)
                             for i, name in enumerate(ADAPTERS)}}


@pytest.fixture(scope="module")
def stack(dirs: dict[str, Path]) -> Iterator[Stack]:
    with Stack.started() as running:
        # A long batch delay: concurrent requests of the base and its adapters meet in one batch.
        running.manage("register_model", "embed", "--source", str(dirs["base"]), "--task", "feature-extraction",
                       "--max-batch-delay-ms", "400")
        for name in ADAPTERS:
            running.manage("register_adapter", name, "--base", "embed", "--source", str(dirs[name]))
        running.create_token("all")
        running.create_token("only-alpha", models="alpha")
        running.start_worker()
        running.start_web()
        running.wait_ready(["embed", *ADAPTERS])
        yield running


def reference(dirs: dict[str, Path], name: str | None) -> np.ndarray:
    """Mean-pooled, normalized vectors of peft's merged model (or the base), one text at a time."""
    import torch
    from transformers import AutoTokenizer

    model = adapter_layouts.merged_model(dirs["base"], dirs[name]) if name else adapter_layouts.base_model(dirs["base"])
    tokenizer = AutoTokenizer.from_pretrained(str(dirs["base"]))
    with torch.inference_mode():
        rows = [model(**tokenizer(t, return_tensors="pt", truncation=True)).last_hidden_state[0].mean(0) for t in TEXTS]
    return torch.nn.functional.normalize(torch.stack(rows), dim=1).numpy()


def assert_close(got: list[list[float]], want: np.ndarray) -> None:
    vectors = np.asarray(got, dtype=np.float32)
    assert vectors.shape == want.shape
    cosines = (vectors * want).sum(1) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(want, axis=1))
    assert float(cosines.min()) >= 0.9999, cosines


def test_an_adapters_name_answers_its_merged_model_on_both_routes(stack: Stack, dirs: dict[str, Path]) -> None:
    status, _, vectors = http_json("POST", f"{stack.url}/models/beta", {"inputs": TEXTS}, token=stack.tokens["all"])
    assert status == 200, vectors
    assert_close(vectors, reference(dirs, "beta"))
    client = openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.tokens["all"], max_retries=0)
    answer = client.embeddings.create(model="gamma", input=TEXTS)
    assert answer.model == "gamma"
    assert_close([d.embedding for d in answer.data], reference(dirs, "gamma"))
    base = reference(dirs, None)
    assert float((reference(dirs, "gamma") * base).sum(1).max()) < 0.9999  # the adapter changes the answer


def test_a_batch_mixing_the_base_and_four_adapters_gives_each_row_its_own_answer(stack: Stack,
                                                                                 dirs: dict[str, Path]) -> None:
    names = ["embed", *ADAPTERS]
    with ThreadPoolExecutor(len(names)) as pool:
        answers = list(pool.map(lambda n: http_json("POST", f"{stack.url}/models/{n}", {"inputs": TEXTS},
                                                    token=stack.tokens["all"]), names))
    sizes = []
    for name, (status, headers, vectors) in zip(names, answers):
        assert status == 200, vectors
        assert_close(vectors, reference(dirs, None if name == "embed" else name))
        sizes.append(int(headers.get("X-Batch-Size") or headers.get("x-batch-size") or 0))
    assert max(sizes) > len(TEXTS), sizes  # rows of several requests (adapters) computed in one batch


def test_a_token_granted_one_adapter_neither_uses_nor_sees_the_others(stack: Stack) -> None:
    token = stack.tokens["only-alpha"]
    status, _, _ = http_json("POST", f"{stack.url}/models/alpha", {"inputs": "hi"}, token=token)
    assert status == 200
    for name in ("beta", "embed"):
        status, _, body = http_json("POST", f"{stack.url}/models/{name}", {"inputs": "hi"}, token=token)
        assert status == 403 and body["error_type"] == "forbidden"
    status, _, listed = http_json("GET", f"{stack.url}/models", token=token)
    assert [m["name"] for m in listed["models"]] == ["alpha"]
    status, _, v1 = http_json("GET", f"{stack.url}/v1/models", token=token)
    assert [m["id"] for m in v1["data"]] == ["alpha"]
