"""Every admin action and page that changes state or runs inference needs its Django permission, on the server.

Staff users with each permission set (none, view only, change, the custom run_test_input and manage_versions,
change with manage_versions, superuser) try every action by POSTing it as the admin's own form would (an action
the user may not take is one the page does not offer, and its POST changes nothing), open and submit the
test-input page, and edit what a model computes. The matrix says which must take effect.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from models_registry.broker import handoff
from models_registry.broker.handoff import InferenceResult
from models_registry.catalog import version_changes
from models_registry.models import ApiToken, BatchFile, BatchJob, RegisteredModel
from tests.integration.admin_session import _FormFields

CHANGELIST = "/admin/models_registry/registeredmodel/"
TOKENS = "/admin/models_registry/apitoken/"
JOBS = "/admin/models_registry/batchjob/"

VIEW = ("view_registeredmodel", "view_apitoken", "view_batchjob")
CHANGE = (*VIEW, "change_registeredmodel", "change_apitoken", "change_batchjob")
ROLES: dict[str, tuple[str, ...] | None] = {  # None: a superuser
    "no permission": (),
    "view only": VIEW,
    "change": CHANGE,
    "run test input": (*VIEW, "run_test_input"),
    "manage versions": (*VIEW, "manage_versions"),
    "change and versions": (*CHANGE, "manage_versions"),
    "superuser": None,
}
# The permissions each attempt needs (all of them).
NEEDS = {
    "disable": {"change_registeredmodel"},
    "enable": {"change_registeredmodel"},
    "load_now": {"change_registeredmodel"},
    "promote": {"manage_versions"},
    "rollback": {"manage_versions"},
    "run_test_input": {"run_test_input"},
    "test input page": {"run_test_input"},
    "edit source": {"change_registeredmodel", "manage_versions"},
    "revoke": {"change_apitoken"},
    "cancel": {"change_batchjob"},
}


def allowed(role: str, attempt: str) -> bool:
    perms = ROLES[role]
    return perms is None or NEEDS[attempt] <= set(perms)


@pytest.fixture
def login(client: Client, django_user_model: Any, transactional_db: None) -> Callable[[str], Client]:
    def as_role(role: str) -> Client:
        perms = ROLES[role]
        user = django_user_model.objects.create_user(role.replace(" ", "-"), password="pw-123456", is_staff=True,
                                                     is_superuser=perms is None)
        user.user_permissions.set(Permission.objects.filter(content_type__app_label="models_registry",
                                                            codename__in=perms or ()))
        client.force_login(user)
        return client

    return as_role


@pytest.fixture
def inferences(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every request that reaches the (stub) worker."""
    seen: list[dict[str, Any]] = []

    async def infer(**kwargs: Any) -> InferenceResult:
        seen.append(kwargs)
        return InferenceResult(outputs=[[{"label": "POSITIVE", "score": 0.9}]], queue_ms=1.0, compute_ms=2.0,
                               batch_size=1)

    monkeypatch.setattr(handoff, "infer", infer)
    return seen


@pytest.fixture
def versioned(make_model: Callable[..., Any], heartbeat: Callable[..., Any]) -> Iterator[RegisteredModel]:
    """A model with live v1 and a canary v2, ready on a live worker."""
    model = make_model("enc")
    version_changes.record(model)
    model.source = "example/enc-two"
    model.save()
    version_changes.record(model, "canary", 25)
    ready = {"state": "ready", "error": "", "device": "cpu", "tasks": ["text-classification"]}
    heartbeat({"enc": ready, "enc.v1": ready, "enc.v2": ready})
    yield RegisteredModel.objects.get(pk=model.pk)


def _act(client: Client, url: str, action: str, pk: int) -> int:
    response = client.post(url, {"action": action, "_selected_action": [pk], "index": 0})
    return response.status_code


@pytest.mark.parametrize("role", list(ROLES))
def test_each_permission_set_takes_exactly_the_actions_it_allows(
        role: str, login: Callable[[str], Client], versioned: RegisteredModel, make_model: Callable[..., Any],
        make_token: Callable[..., str], inferences: list[dict[str, Any]]) -> None:
    on = make_model("on")
    off = make_model("off", enabled=False)
    make_token("team")
    token = ApiToken.objects.get(name="team")
    upload = BatchFile.objects.create(public_id="file-in", owner=token, filename="in.jsonl", purpose="batch",
                                      bytes=10, lines=1, storage_name="in.jsonl")
    job = BatchJob.objects.create(public_id="batch_x", owner=token, input_file=upload, endpoint="/models/on",
                                  status="in_progress", total=1, in_progress_at=timezone.now())
    client = login(role)
    forbidden = ROLES[role] == ()

    # Actions on the model list. A user with no permission at all is refused the page (403).
    page = client.get(CHANGELIST)
    assert page.status_code == (403 if forbidden else 200)
    html = page.content.decode()
    for action in ("disable", "enable", "load_now", "promote", "rollback", "run_test_input"):
        offered = f'<option value="{action}">' in html
        assert offered == allowed(role, action), f"{role}: {action} offered={offered}"

    fresh = make_model("fresh")
    version_changes.record(fresh)
    assert _act(client, CHANGELIST, "disable", on.pk) in (200, 302, 403)
    assert RegisteredModel.objects.get(pk=on.pk).enabled is not allowed(role, "disable")
    _act(client, CHANGELIST, "enable", off.pk)
    assert RegisteredModel.objects.get(pk=off.pk).enabled is allowed(role, "enable")
    _act(client, CHANGELIST, "load_now", fresh.pk)  # a fresh copy of v1 becomes the target
    assert (RegisteredModel.objects.get(pk=fresh.pk).target_version == 2) is allowed(role, "load_now")

    _act(client, CHANGELIST, "promote", versioned.pk)
    promoted = RegisteredModel.objects.get(pk=versioned.pk)
    assert (promoted.target_version == 2) is allowed(role, "promote")
    assert (promoted.candidate_version == 0) is allowed(role, "promote")
    if not allowed(role, "promote"):
        _act(client, CHANGELIST, "rollback", versioned.pk)
        assert (RegisteredModel.objects.get(pk=versioned.pk).candidate_version == 0) is allowed(role, "rollback")

    _act(client, CHANGELIST, "run_test_input", versioned.pk)
    assert bool(inferences) is allowed(role, "run_test_input")
    inferences.clear()

    # The test-input page: the link on the change page, the form, and its POST (inference with no API token).
    change_page = client.get(f"{CHANGELIST}{versioned.pk}/change/")
    assert change_page.status_code == (403 if forbidden else 200)
    assert ("test-input/" in change_page.content.decode()) is allowed(role, "test input page")
    page_url = f"{CHANGELIST}{versioned.pk}/test-input/"
    assert client.get(page_url).status_code == (200 if allowed(role, "test input page") else 403)
    posted = client.post(page_url, {"task": "text-classification"})
    assert posted.status_code == (302 if allowed(role, "test input page") else 403)
    assert bool(inferences) is allowed(role, "test input page")

    # What the model computes (an edit makes a new version): change and manage_versions together. The form is
    # posted as the page rendered it, with a new source (a read-only source is ignored, a view-only user is refused).
    edit_page = client.get(f"{CHANGELIST}{on.pk}/change/").content.decode()
    assert ('name="source"' in edit_page) is allowed(role, "edit source")
    form = _FormFields()  # what a browser posts from the page
    form.feed(edit_page)
    client.post(f"{CHANGELIST}{on.pk}/change/", {**form.fields, "name": "on", "source": "example/edited"})
    assert (RegisteredModel.objects.get(pk=on.pk).source == "example/edited") is allowed(role, "edit source"), role

    # Tokens and batch jobs.
    _act(client, TOKENS, "revoke", token.pk)
    assert ApiToken.objects.get(pk=token.pk).revoked is allowed(role, "revoke")
    _act(client, JOBS, "cancel", job.pk)
    assert (BatchJob.objects.get(pk=job.pk).status == "cancelling") is allowed(role, "cancel")


def test_rollback_needs_the_version_permission(login: Callable[[str], Client], versioned: RegisteredModel) -> None:
    """The matrix test promotes first where it may; here the rollback alone, for a change-only user and one who may."""
    client = login("change")
    _act(client, CHANGELIST, "rollback", versioned.pk)
    assert RegisteredModel.objects.get(pk=versioned.pk).candidate_version == 2
    client.logout()
    client = login("manage versions")
    _act(client, CHANGELIST, "rollback", versioned.pk)
    assert RegisteredModel.objects.get(pk=versioned.pk).candidate_version == 0
