"""Adapters in the registry: register_adapter checks the files against the base, tokens are granted adapters by
name, a request naming an adapter goes to its base's queue with the adapter's name in the message, and versions of
an adapter: new files replace the live ones (the next version, the old kept for a rollback), a canary answers its
share beside them until promoted or dropped, and the specs list the canary under its wire name."""

from __future__ import annotations

import asyncio
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError

from models_registry.broker.messages import WorkRequest
from models_registry.catalog.specs import AdapterSpec, read_specs
from models_registry.models import Adapter, ApiToken, ModelTask, RegisteredModel
from models_registry.policy import serving
from tests.asgi_client import AsyncClient

pytestmark = [pytest.mark.django_db(transaction=True)]
pytest.importorskip("peft")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from tests import adapter_layouts, model_factory

    root = tmp_path_factory.mktemp("adapter-files")
    base = model_factory.build_sequence_classifier(root / "base")
    wide = model_factory.build_wide_feature_extractor(root / "wide")
    return {"base": base, "wide": wide,
            "a": adapter_layouts.build_adapter(base, root / "a", seed=1, task_type="SEQ_CLS"),
            "b": adapter_layouts.build_adapter(base, root / "b", seed=2, task_type="SEQ_CLS"),
            "wide-adapter": adapter_layouts.build_adapter(wide, root / "wide-adapter", seed=3)}


def register_base(path: Path, name: str = "cls", task: str = "text-classification") -> RegisteredModel:
    model = RegisteredModel.objects.create(name=name, source=str(path))
    ModelTask.objects.create(model=model, name=task, task=task)
    return model


def register(name: str, *args: str) -> str:
    out = StringIO()
    call_command("register_adapter", name, *args, stdout=out)
    return out.getvalue()


def test_register_adapter_is_idempotent_and_checks_the_base(files: dict[str, Path]) -> None:
    register_base(files["base"])
    assert "registered adapter a of cls" in register("a", "--base", "cls", "--source", str(files["a"]))
    assert "updated adapter a" in register("a", "--source", str(files["a"]), "--disabled")
    assert Adapter.objects.get(name="a").enabled is False
    with pytest.raises(CommandError, match=r"lora_A is 4 x 48 .* the base layer is 32 x 32"):
        register("wrong", "--base", "cls", "--source", str(files["wide-adapter"]))
    with pytest.raises(CommandError, match="adapters and models share one namespace"):
        register("cls", "--base", "cls", "--source", str(files["b"]))
    with pytest.raises(CommandError, match="no registered model 'nope'"):
        register("c", "--base", "nope", "--source", str(files["b"]))
    clash = RegisteredModel(name="a", source=str(files["base"]))
    with pytest.raises(ValidationError, match="An adapter is named 'a'"):
        clash.full_clean()


def test_an_onnx_backed_base_takes_no_adapters(files: dict[str, Path]) -> None:
    base = register_base(files["base"])
    base.backend = "onnxruntime"
    base.save()
    with pytest.raises(CommandError, match="ONNX Runtime .* serves the base only"):
        register("a", "--base", "cls", "--source", str(files["a"]))


def create_token(name: str, models: str) -> str:
    out = StringIO()
    call_command("create_api_token", name, "--models", models, stdout=out)
    return out.getvalue().strip().splitlines()[-1]


async def post(client: AsyncClient, token: str, path: str, body: Any) -> Any:
    return await client.post(path, data=json.dumps(body), content_type="application/json",
                             headers={"Authorization": f"Bearer {token}"})


@pytest.mark.usefixtures("require_tokens")
async def test_a_token_granted_one_adapter_uses_it_and_neither_sees_nor_uses_the_other(
    files: dict[str, Path], calls: list[dict[str, Any]],
) -> None:
    await sync_to_async(register_base)(files["base"])
    for name in ("a", "b"):
        await sync_to_async(register)(name, "--base", "cls", "--source", str(files[name]))
    token = await sync_to_async(create_token)("only-a", "a")
    assert await sync_to_async(lambda: ApiToken.objects.get(name="only-a").scope())() == frozenset({"a"})
    client = AsyncClient()
    listed = await client.get("/models", headers={"Authorization": f"Bearer {token}"})
    assert [(m["name"], m["base"]) for m in listed.json()["models"]] == [("a", "cls")]
    answer = await post(client, token, "/models/a", {"inputs": "hello"})
    assert answer.status_code == 200, answer.json()
    sent = calls[-1]
    assert (sent["model"], sent["adapter"], sent["task"]) == ("cls", "a.v1", "text-classification")  # the base's queue, the version's files
    for path in ("/models/b", "/models/cls"):
        refused = await post(client, token, path, {"inputs": "hello"})
        assert refused.status_code == 403 and refused.json()["error_type"] == "forbidden"
        assert (await client.get(path, headers={"Authorization": f"Bearer {token}"})).status_code == 403
    detail = (await client.get("/models/a", headers={"Authorization": f"Bearer {token}"})).json()
    assert (detail["name"], detail["base"], detail["source"]) == ("a", "cls", "(local directory)")
    assert len(calls) == 1


@pytest.mark.usefixtures("require_tokens")
async def test_an_adapter_of_an_onnx_backed_base_answers_409(files: dict[str, Path], calls: list[dict[str, Any]]) -> None:
    base = await sync_to_async(register_base)(files["base"])
    await sync_to_async(register)("a", "--base", "cls", "--source", str(files["a"]))
    base.backend = "onnxruntime"  # switched after the adapter was registered
    await sync_to_async(base.save)()
    token = await sync_to_async(create_token)("t", "a,cls")
    refused = await post(AsyncClient(), token, "/models/a", {"inputs": "hello"})
    assert refused.status_code == 409 and "ONNX Runtime" in refused.json()["error"]
    assert calls == []


def test_the_wire_message_carries_the_adapter() -> None:
    request = WorkRequest(id="1", reply="r", model="cls", task="t", inputs=["x"], parameters={}, deadline=1.0,
                          adapter="a")
    assert WorkRequest.from_wire(request.to_wire()) == request
    assert "adapter" not in WorkRequest(id="1", reply="r", model="cls", task="t", inputs=["x"], parameters={},
                                        deadline=1.0).to_wire()


def test_a_disabled_adapter_is_listed_disabled_and_its_base_does_not_load_it(files: dict[str, Path]) -> None:
    from models_registry.catalog.specs import read_specs, worker_specs

    register_base(files["base"])
    register("a", "--base", "cls", "--source", str(files["a"]))
    register("b", "--base", "cls", "--source", str(files["b"]), "--disabled")
    specs = read_specs()
    assert specs["a"].enabled and not specs["b"].enabled and specs["a"].served_as == "cls"
    assert [a.name for a in specs["cls"].adapters] == ["a"]
    assert set(worker_specs(specs)) == {"cls"}



def test_registering_replacing_or_removing_adapters_never_reloads_their_base(files: dict[str, Path]) -> None:
    from models_registry.catalog.specs import read_specs
    from models_registry.models import Adapter
    from models_registry.worker.slot_change import SlotChange, slot_change

    register_base(files["base"])
    views = [read_specs()["cls"]]
    register("a", "--base", "cls", "--source", str(files["a"]))  # the base's first adapter
    views.append(read_specs()["cls"])
    register("b", "--base", "cls", "--source", str(files["b"]))
    views.append(read_specs()["cls"])
    register("b", "--base", "cls", "--source", str(files["a"]))  # replaced: other files under the same name
    views.append(read_specs()["cls"])
    Adapter.objects.filter(name="a").delete()
    views.append(read_specs()["cls"])
    Adapter.objects.filter(name="b").delete()  # the last one
    views.append(read_specs()["cls"])
    assert [len(v.adapters) for v in views] == [0, 1, 2, 2, 1, 0]
    assert views[2].find_adapter("b.v1").source != views[3].find_adapter("b.v2").source  # each version its name
    assert {v.load_key() for v in views} == {views[0].load_key()}
    assert [slot_change(old, new) for old, new in zip(views, views[1:])] == [SlotChange.APPLY] * 5


def test_the_admin_form_says_why_an_adapter_does_not_fit(files: dict[str, Path], admin_client: Any) -> None:
    base = register_base(files["base"])
    page = admin_client.post("/admin/models_registry/adapter/add/", {
        "name": "wrong", "base": base.pk, "source": str(files["wide-adapter"]), "revision": "", "enabled": "on"})
    assert page.status_code == 200  # the form again, with the error
    assert "the base layer is 32 x 32" in page.content.decode()
    assert not Adapter.objects.filter(name="wrong").exists()
    done = admin_client.post("/admin/models_registry/adapter/add/", {
        "name": "a", "base": base.pk, "source": str(files["a"]), "revision": "", "enabled": "on"})
    assert done.status_code == 302 and Adapter.objects.filter(name="a").exists()


@pytest.mark.usefixtures("require_tokens")
async def test_the_usage_ledger_and_the_metrics_name_the_adapter(files: dict[str, Path], broker: str,
                                                                 calls: list[dict[str, Any]]) -> None:
    import redis
    from channels.layers import get_channel_layer

    from models_registry.broker import deferred
    from prometheus_client import REGISTRY

    from models_registry.observe import ledger_flush

    await sync_to_async(register_base)(files["base"])
    await sync_to_async(register)("a", "--base", "cls", "--source", str(files["a"]))
    token = await sync_to_async(create_token)("t", "a,cls")
    client = AsyncClient()
    for path in ("/models/a", "/models/a", "/models/cls"):
        assert (await post(client, token, path, {"inputs": "hello"})).status_code == 200
    while not deferred.writes.idle:
        await asyncio.sleep(0.005)
    await sync_to_async(ledger_flush.flush)(redis.Redis.from_url(broker), get_channel_layer().prefix, 10.0)
    rows = (await client.get("/v1/usage", headers={"Authorization": f"Bearer {token}"})).json()["data"]
    assert sorted((r["model"], r["requests"]) for r in rows) == [("a", 2), ("cls", 1)]
    counted = REGISTRY.get_sample_value("hosting_inference_requests_total",
                                        {"model": "a", "task": "text-classification", "status": "200"})
    assert counted is not None and counted >= 2


def live(name: str = "a") -> tuple[int, str, str]:
    adapter = Adapter.objects.get(name=name)
    return adapter.version, Path(adapter.source).name, Path(adapter.previous_source).name if adapter.previous_source \
        else ""


def test_new_files_a_canary_its_promotion_and_rollbacks_number_the_versions(files: dict[str, Path]) -> None:
    register_base(files["base"])
    assert "(v1)" in register("a", "--base", "cls", "--source", str(files["a"]))
    assert "(v2)" in register("a", "--source", str(files["b"]))  # replaced at once
    assert live() == (2, "b", "a")
    assert "(v2, canary v3 at 25%)" in register("a", "--source", str(files["a"]), "--canary", "25")
    assert live() == (2, "b", "a")  # the live files are untouched
    assert "canary v3 at 60%" in register("a", "--canary", "60")
    register("a", "--promote")
    assert live() == (3, "a", "b") and not Adapter.objects.get(name="a").canary_source
    register("a", "--rollback")
    assert live() == (4, "b", "")
    with pytest.raises(CommandError, match="no earlier files to roll back to"):
        register("a", "--rollback")
    with pytest.raises(CommandError, match="no canary to promote"):
        register("a", "--promote")
    register("a", "--source", str(files["a"]), "--canary", "10")
    register("a", "--rollback")  # with a canary: only the canary goes
    assert live() == (4, "b", "") and not Adapter.objects.get(name="a").canary_source


def test_a_canarys_files_are_checked_against_the_base_and_its_share_must_be_some(files: dict[str, Path]) -> None:
    register_base(files["base"])
    register("a", "--base", "cls", "--source", str(files["a"]))
    with pytest.raises(CommandError, match=r"canary_source: .*lora_A is 4 x 48"):
        register("a", "--source", str(files["wide-adapter"]), "--canary", "20")
    with pytest.raises(CommandError, match="1-100 percent"):
        register("a", "--source", str(files["b"]), "--canary", "0")
    with pytest.raises(CommandError, match="has no canary"):
        register("a", "--canary", "30")


def test_the_specs_list_a_canary_under_its_wire_name_and_requests_split_by_its_share(files: dict[str, Path]) -> None:
    register_base(files["base"])
    register("a", "--base", "cls", "--source", str(files["a"]))
    register("a", "--source", str(files["b"]), "--canary", "30")
    specs = read_specs()
    canary = AdapterSpec("a.v2", str(files["b"]), "", 2, "a", 30)
    assert specs["cls"].adapters == (AdapterSpec("a", str(files["a"]), "", 1), canary)
    assert "a.v2" not in specs  # clients never name it
    entry = specs["a"]
    assert entry.adapter_canary == canary and specs["cls"].find_adapter("a.v2") == canary
    assert specs["cls"].find_adapter("a.v1") == entry.adapter and specs["cls"].find_adapter("a") is None
    assert serving.adapter_files(entry, 0.29) == canary
    assert serving.adapter_files(entry, 0.30) == entry.adapter
    target = serving.Target("cls", 0, 0.0, adapter=canary)
    assert target.adapter_wire == "a.v2" and target.headers() == {serving.ADAPTER_VERSION_HEADER: "2"}
    assert serving.Target("cls", 0, 0.0, adapter=entry.adapter).adapter_wire == "a.v1"
    # A worker's view against a web's a refresh apart: an older version (or a dropped canary) is computed by the
    # live files; a newer one waits for the refresh that lists it; an adapter not listed at all waits, then 503s.
    base = specs["cls"]
    assert base.adapter_for("a.v0") == entry.adapter and not base.awaits_adapter("a.v0")
    assert base.awaits_adapter("a.v3") and base.adapter_for("a.v3") == entry.adapter
    assert base.awaits_adapter("zz.v1") and base.adapter_for("zz.v1") is None
    assert not base.awaits_adapter("a.v2") and base.adapter_for("a.v2") == canary
