"""The admin page that runs an uploaded file (image, audio or text) through one of a model's tasks."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse

from models_registry.api.sample_request import run_test_input
from models_registry.models import RegisteredModel


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
