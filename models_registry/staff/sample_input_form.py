"""The admin's test input: the page that runs an uploaded file (image, audio or text) through one of a model's tasks,
its link on the model's page and the list's action. All three need models_registry.run_test_input (checked on the
server): the test input runs inference with no API token and no rate limit."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path
from django.utils.html import format_html

from models_registry.staff.sample_request import run_test_input
from models_registry.models import RegisteredModel
from models_registry.models.registered import RUN_TEST_INPUT


class TestInputForm(forms.Form):
    """Which task, and the file to send it (none: a sample)."""

    task = forms.ChoiceField()
    file = forms.FileField(required=False, help_text="an image for image tasks, audio for audio tasks, "
                                                     "UTF-8 text for text tasks; empty: a sample")

    def __init__(self, *args: Any, tasks: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["task"].choices = [(name, name) for name in tasks]


def view(model_admin: Any, request: HttpRequest, pk: int, state_of: Callable[[str], str]) -> HttpResponse:
    """GET: the form. POST: run the file through the chosen task and show the answer as an admin message."""
    model = get_object_or_404(RegisteredModel, pk=pk)
    tasks = {task.name: task for task in model.tasks.all()}
    form = TestInputForm(request.POST or None, request.FILES or None, tasks=list(tasks))
    if request.method == "POST" and form.is_valid():
        upload = form.cleaned_data["file"]
        data = upload.read() if upload is not None else None
        ok, message = run_test_input(tasks[form.cleaned_data["task"]], state_of(model.name), data)
        model_admin.message_user(request, message, messages.SUCCESS if ok else messages.ERROR)
        return HttpResponseRedirect(request.path)
    context = {**model_admin.admin_site.each_context(request), "model": model, "form": form,
               "title": f"Test input: {model.name}", "opts": model_admin.model._meta}
    return TemplateResponse(request, "admin/models_registry/registeredmodel/test_input.html", context)


class TestInputPage:
    """The registered model admin's test input: a page, its link (a read-only field) and an action."""

    admin_site: Any
    opts: Any
    message_user: Any
    state_of: Callable[[str], str]  # a model's best state on the live workers

    def has_run_test_input_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """Inference with no API token: its own permission, not the change permission."""
        return bool(request.user.has_perm(f"{self.opts.app_label}.{RUN_TEST_INPUT}"))

    def test_input_fields(self, request: HttpRequest, fields: Any) -> list[str]:
        """The read-only fields, the test-input link only for those who may run it."""
        return [f for f in fields if f != "test_input" or self.has_run_test_input_permission(request)]

    def get_urls(self) -> list[Any]:
        """The model's "Run a test input" page (an uploaded image, clip or text file) beside the admin's own."""
        page = self.admin_site.admin_view(self.test_input_view)
        return [path("<int:pk>/test-input/", page, name="models_registry_registeredmodel_test_input"),
                *super().get_urls()]  # type: ignore[misc]

    def test_input_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """Upload a file and run it through one of the model's tasks on a live worker (403 without the permission)."""
        if not self.has_run_test_input_permission(request):
            raise PermissionDenied
        return view(self, request, pk, self.state_of)

    @admin.display(description="test input")
    def test_input(self, obj: RegisteredModel) -> str:
        """A link to the page that runs an uploaded file through the model."""
        if obj.pk is None:
            return "-"
        return format_html('<a href="{}">Run a test input (upload an image, audio or text file)</a>',
                           f"../../{obj.pk}/test-input/")

    @admin.action(description="Run a test input through the real worker", permissions=[RUN_TEST_INPUT])
    def run_test_input(self, request: HttpRequest, queryset: Any) -> None:
        """Send each task of the selected models a sample input and show what came back."""
        for model in queryset:
            state = self.state_of(model.name)
            for task in model.tasks.all():
                ok, message = run_test_input(task, state)
                self.message_user(request, message, messages.SUCCESS if ok else messages.ERROR)
