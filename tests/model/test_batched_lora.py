"""Batched LoRA on the runner: rows of several PEFT adapters and of the base in one batch, each row the answer peft's
merged adapter gives it alone (vectors cosine >= 0.9999, scores within 1e-4). No Redis: the runner itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from models_registry.catalog.specs import AdapterSpec, ModelSpec, TaskSpec
from models_registry.core.batch_types import BatchPolicy, ItemFailure
from models_registry.core.errors import Conflict
from tests import adapter_layouts, hub_layouts, model_factory

torch = pytest.importorskip("torch")
pytest.importorskip("peft")
from models_registry.inference import batched_lora  # noqa: E402
from models_registry.inference.model_runner import PipelineRunner  # noqa: E402
from models_registry.api.hf.payloads import decode_vector  # noqa: E402

TEXTS = ["Which worker answers the queue?", "a short one", "the model server packs sentences into rows " * 3,
         "ok", "LoRA adapters share the base model's batch", "one more sentence of middling length here"]
ADAPTERS = ("alpha", "beta", "gamma", "delta")


def task(kind: str) -> TaskSpec:
    return TaskSpec(name=kind, task=kind, parameters={}, pooling="mean", normalize=False,
                    policy=BatchPolicy(max_batch_size=64), timeout_s=30.0)


def spec(path: Path, kind: str, adapters: dict[str, Path], **fields: object) -> ModelSpec:
    return ModelSpec(name="base", source=str(path), revision="", device="cpu", dtype="float32", enabled=True,
                     tasks={kind: task(kind)}, default_task=kind,
                     adapters=tuple(AdapterSpec(name, str(d)) for name, d in adapters.items()), **fields)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("lora-embed")
    base = hub_layouts.build(hub_layouts.FAMILIES["mpnet"], root / "base")  # mean pooling, Normalize
    adapters = {name: adapter_layouts.build_adapter(base, root / name, seed=i + 1, r=2 + 2 * i,
                                                    use_rslora=name == "gamma",
                                                    targets=("query", "value", "dense") if name == "delta"
                                                    else ("query", "value"))
                for i, name in enumerate(ADAPTERS)}
    return base, adapters


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    root = tmp_path_factory.mktemp("lora-cls")
    base = model_factory.build_sequence_classifier(root / "base")
    adapters = {name: adapter_layouts.build_adapter(base, root / name, seed=i + 11, task_type="SEQ_CLS")
                for i, name in enumerate(ADAPTERS)}
    return base, adapters


def reference_vectors(base: Path, adapter: Path | None) -> torch.Tensor:
    """Mean-pooled, normalized vectors of the merged model, one input at a time."""
    from transformers import AutoTokenizer

    model = adapter_layouts.merged_model(base, adapter) if adapter else adapter_layouts.base_model(base)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    vectors = []
    with torch.inference_mode():
        for text in TEXTS:
            encoded = tokenizer(text, return_tensors="pt", truncation=True)
            hidden = model(**encoded).last_hidden_state[0]
            vectors.append(torch.nn.functional.normalize(hidden.mean(0), dim=0))
    return torch.stack(vectors)


def vectors_of(outputs: list[object]) -> torch.Tensor:
    assert not any(isinstance(o, ItemFailure) for o in outputs), outputs
    return torch.stack([torch.from_numpy(decode_vector(o).copy()) for o in outputs])


@pytest.mark.parametrize("packing, slack", [(True, 0.0), (True, 1e9), (False, 0.0)],
                         ids=["packed-rows-mixed", "packed-rows-per-adapter", "padded"])
def test_a_mixed_batch_gives_each_row_its_merged_adapters_vector(embedder: tuple[Path, dict[str, Path]],
                                                                 packing: bool, slack: float,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from models_registry.inference import embeddings

    monkeypatch.setattr(embeddings, "ADAPTER_ROWS_SLACK", slack)  # 0: rows mix adapters; huge: one adapter a row
    base, adapters = embedder
    runner = PipelineRunner(packing=packing, torchscript=False)
    loaded = runner.load(spec(base, "feature-extraction", adapters))
    assert (loaded.eager_encoder is not None) == (loaded.packed_encoder is not None) == packing
    # every row an adapter of its own (and the base), shuffled so sorting and packing move them around
    names: list[str | None] = [None, *ADAPTERS, "alpha"]
    rows = [(TEXTS[i], names[(i * 5) % len(names)]) for i in range(len(TEXTS))] * 2
    by_name = {a.name: a for a in loaded.spec.adapters}
    outputs = runner.run(loaded, loaded.spec.tasks["feature-extraction"], [t for t, _ in rows], [{}] * len(rows),
                         adapters=[by_name[n] if n else None for _, n in rows])
    got = vectors_of(outputs)
    references = {n: reference_vectors(base, adapters[n] if n else None) for n in {n for _, n in rows}}
    for position, (text, name) in enumerate(rows):
        want = references[name][TEXTS.index(text)]
        assert float(torch.dot(got[position], want)) >= 0.9999, (name, text)
    assert float(torch.dot(references["alpha"][0], references[None][0])) < 0.999  # the adapters change the answer
    alone = vectors_of(runner.run(loaded, loaded.spec.tasks["feature-extraction"], [TEXTS[0]], [{}],
                                  adapters=[by_name["beta"]]))
    assert float(torch.dot(alone[0], references["beta"][0])) >= 0.9999


def test_a_mixed_classification_batch_scores_each_row_as_peft_merged(classifier: tuple[Path, dict[str, Path]]) -> None:
    base, adapters = classifier
    runner = PipelineRunner(packing=False, torchscript=False)
    loaded = runner.load(spec(base, "text-classification", adapters))
    by_name = {a.name: a for a in loaded.spec.adapters}
    names: list[str | None] = [None, *ADAPTERS]
    rows = [(text, names[i % len(names)]) for i, text in enumerate(TEXTS * 2)]
    outputs = runner.run(loaded, loaded.spec.tasks["text-classification"], [t for t, _ in rows], [{}] * len(rows),
                         adapters=[by_name[n] if n else None for _, n in rows])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    for (text, name), output in zip(rows, outputs):
        model = (adapter_layouts.merged_model(base, adapters[name], "SEQ_CLS") if name
                 else adapter_layouts.base_model(base, "SEQ_CLS"))
        with torch.inference_mode():
            probs = torch.softmax(model(**tokenizer(text, return_tensors="pt")).logits[0], dim=-1)
        got = {entry["label"]: entry["score"] for entry in output}
        for index, label in model.config.id2label.items():
            assert abs(got[label] - float(probs[index])) <= 1e-4, (name, text)
    scored = {n: o[0]["score"] for (t, n), o in zip(rows, outputs) if t == TEXTS[0]}
    assert len(set(round(v, 4) for v in scored.values())) > 1  # the adapters change the answer


def test_the_lora_product_equals_peft_merged_weights() -> None:
    """The segmented product: each row gets only its adapter's scaled B @ A (base rows nothing)."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(6, 5)
    adapters = [batched_lora.LoraWeights(f"a{k}", ("", ""), {"layer": (torch.randn(r, 6), torch.randn(5, r), s)})
                for k, (r, s) in enumerate([(2, 0.5), (3, 2.0)])]
    x = torch.randn(7, 6)
    slots = torch.tensor([0, 1, 2, 1, 0, 2, 2])
    stack = batched_lora.stack_layer(adapters, "layer")
    assert stack is not None
    with torch.no_grad():
        got = batched_lora.add_by_segment(layer(x), x, batched_lora.segments(slots), stack)
    by_row = layer(x) + batched_lora.lora_delta_by_row(x.unsqueeze(1), slots, stack)[:, 0]  # one position per row
    assert torch.allclose(by_row, got, atol=1e-5)
    for row, slot in enumerate(slots.tolist()):
        weight = layer.weight.detach().clone()
        if slot:
            a, b, scaling = adapters[slot - 1].layers["layer"]
            weight += scaling * b @ a  # peft's merge: W + scaling * B @ A
        want = torch.nn.functional.linear(x[row], weight, layer.bias)
        assert torch.allclose(got[row], want, atol=1e-5)


def test_onnx_backed_bases_refuse_adapter_rows_and_keep_base_rows(embedder: tuple[Path, dict[str, Path]]) -> None:
    base, adapters = embedder
    runner = PipelineRunner(packing=False, torchscript=False)
    loaded = runner.load(spec(base, "feature-extraction", {"alpha": adapters["alpha"]}, backend="onnxruntime"))
    outputs = runner.run(loaded, loaded.spec.tasks["feature-extraction"], TEXTS[:2], [{}, {}],
                         adapters=[None, loaded.spec.adapters[0]])
    assert not isinstance(outputs[0], ItemFailure)
    assert isinstance(outputs[1], ItemFailure) and isinstance(outputs[1].error, Conflict)
    assert "ONNX Runtime" in outputs[1].error.message


def test_a_mixed_reranking_batch_scores_each_pair_as_peft_merged(tmp_path: Path) -> None:
    base = model_factory.build_cross_encoder(tmp_path / "base")
    adapters = {name: adapter_layouts.build_adapter(base, tmp_path / name, seed=i + 21, task_type="SEQ_CLS")
                for i, name in enumerate(ADAPTERS[:2])}
    runner = PipelineRunner(packing=False, torchscript=False)
    loaded = runner.load(spec(base, "text-ranking", adapters))
    by_name = {a.name: a for a in loaded.spec.adapters}
    names: list[str | None] = [None, "alpha", "beta"]
    pairs = [({"query": "which worker answers?", "text": text}, names[i % 3]) for i, text in enumerate(TEXTS * 2)]
    scores = runner.run(loaded, loaded.spec.tasks["text-ranking"], [p for p, _ in pairs], [{"raw_scores": True}] *
                        len(pairs), adapters=[by_name[n] if n else None for _, n in pairs])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base))
    models = {n: adapter_layouts.merged_model(base, adapters[n], "SEQ_CLS") if n
              else adapter_layouts.base_model(base, "SEQ_CLS") for n in names}
    for (pair, name), score in zip(pairs, scores):
        with torch.inference_mode():
            want = float(models[name](**tokenizer(pair["query"], pair["text"], return_tensors="pt")).logits[0, 0])
        assert abs(score - want) <= 1e-4, (name, pair)
    encoded = tokenizer("which worker answers?", TEXTS[0], return_tensors="pt")
    with torch.inference_mode():  # the adapter changes the score (so equal scores above mean something)
        assert abs(float(models["alpha"](**encoded).logits[0, 0]) - float(models[None](**encoded).logits[0, 0])) > 1e-3


@pytest.mark.parametrize("fixed_graph", ["trace", "onnxruntime"])
def test_a_base_loaded_before_its_adapters_on_a_fixed_graph_serves_them_in_place(
        embedder: tuple[Path, dict[str, Path]], classifier: tuple[Path, dict[str, Path]], fixed_graph: str,
        tmp_path: Path) -> None:
    """Issue 54's hot changes: no reload for a first adapter; its rows run the eager forward, base rows the graph."""
    if fixed_graph == "onnxruntime":
        pytest.importorskip("onnxruntime")
        from models_registry.inference.onnx_backend import OrtEncoder, OrtSettings

        runner = PipelineRunner(packing=True, torchscript=False, ort=OrtSettings(tmp_path))
    else:
        runner = PipelineRunner(packing=True, torchscript=True)
    base, adapters = embedder
    loaded = runner.load(spec(base, "feature-extraction", {}))  # registered without adapters: as a base first loads
    assert loaded.eager_encoder is not None and loaded.packed_encoder is not loaded.eager_encoder
    if fixed_graph == "onnxruntime":
        assert isinstance(loaded.packed_encoder, OrtEncoder)
    alpha = AdapterSpec("alpha", str(adapters["alpha"]))
    task_spec = loaded.spec.tasks["feature-extraction"]
    got = vectors_of(runner.run(loaded, task_spec, TEXTS[:3], [{}] * 3, adapters=[None, alpha, alpha]))
    want_base, want_alpha = reference_vectors(base, None), reference_vectors(base, adapters["alpha"])
    assert float(torch.dot(got[0], want_base[0])) >= 0.9999
    for position in (1, 2):
        assert float(torch.dot(got[position], want_alpha[position])) >= 0.9999
    plain = vectors_of(runner.run(loaded, task_spec, TEXTS[:3], [{}] * 3))  # base rows alone: the fixed graph again
    assert all(float(torch.dot(plain[i], want_base[i])) >= 0.9999 for i in range(3))
    if fixed_graph == "onnxruntime":  # classification logits on ONNX Runtime: adapter rows on the torch forward
        cls_base, cls_adapters = classifier
        scored = runner.load(spec(cls_base, "text-classification", {}))
        assert scored.backend.get("task_backends", {}).get("text-classification") == "onnxruntime", scored.backend
        beta = AdapterSpec("beta", str(cls_adapters["beta"]))
        outputs = runner.run(scored, scored.spec.tasks["text-classification"], TEXTS[:2], [{}, {}],
                             adapters=[None, beta])
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(cls_base))
        for text, name, output in zip(TEXTS[:2], (None, "beta"), outputs):
            model = (adapter_layouts.merged_model(cls_base, cls_adapters["beta"], "SEQ_CLS") if name
                     else adapter_layouts.base_model(cls_base, "SEQ_CLS"))
            with torch.inference_mode():
                probs = torch.softmax(model(**tokenizer(text, return_tensors="pt")).logits[0], dim=-1)
            got_scores = {entry["label"]: entry["score"] for entry in output}
            for index, label in model.config.id2label.items():
                assert abs(got_scores[label] - float(probs[index])) <= 1e-4, (name, text)
        assert "forward" in vars(scored.pipelines["text-classification"].model)  # the ONNX forward is back
