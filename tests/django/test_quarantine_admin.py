"""Quarantined (poison) requests: read-only in the admin, counted in /metrics."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from models_registry.models import QuarantinedRequest


@pytest.mark.django_db
def test_quarantined_requests_are_listed_read_only_and_counted(admin_client: Any) -> None:
    QuarantinedRequest.objects.create(request_id="r1", model="qa", task="question-answering", inputs=1,
                                      input_bytes=2048)
    QuarantinedRequest.objects.create(request_id="r2", model="qa", task="question-answering", inputs=3)
    page = admin_client.get("/admin/models_registry/quarantinedrequest/")
    assert page.status_code == 200 and b"r1" in page.content and b"r2" in page.content
    assert admin_client.get("/admin/models_registry/quarantinedrequest/add/").status_code == 403
    metrics = Client().get("/metrics").content.decode()
    assert 'hosting_poison_requests_total{model="qa",task="question-answering"} 2.0' in metrics
