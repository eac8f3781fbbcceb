"""The Responses API's stored responses: what GET /v1/responses/{id} answers and previous_response_id continues."""

from __future__ import annotations

from django.db import models

from models_registry.models.tokens import ApiToken


class StoredResponse(models.Model):
    """One answer of POST /v1/responses kept for its token: the Response object and the conversation it ends."""

    public_id = models.CharField(max_length=40, unique=True, editable=False, help_text="resp_…, as the API shows it.")
    owner = models.ForeignKey(ApiToken, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="stored_responses", help_text="Only this token sees it (none: tokens off).")
    response = models.JSONField(help_text="The Response object as it was answered.")
    conversation = models.JSONField(default=list, help_text="The input and output items, oldest first.")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True,
                                      help_text="Deleted by the job drivers' sweep after this.")

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.public_id
