"""API tokens: stored hashed, optionally limited to some models, rates and a priority."""

from __future__ import annotations

import hashlib
import secrets

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models.signals import m2m_changed
from django.utils import timezone

from models_registry.models.adapters import Adapter
from models_registry.models.registered import RegisteredModel


def hash_token(raw: str) -> str:
    """The stored form of an API token."""
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token, stored hashed, optionally limited to some models, rates and a priority."""

    PRIORITIES = [("interactive", "interactive"), ("batch", "batch")]

    name = models.CharField(max_length=100, unique=True)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    prefix = models.CharField(max_length=12, editable=False, help_text="First characters, to recognise it.")
    # An explicit flag, not "no models listed": deleting a token's last model must leave it
    # allowed nothing, never everything. Adding models to the list clears it (signals below).
    all_models = models.BooleanField(
        default=True, help_text="Every model, present and future. Selecting models below limits the token to them "
                                "(none selected then = no model).",
    )
    allowed_models = models.ManyToManyField(RegisteredModel, blank=True, help_text="Used when 'all models' is off.")
    allowed_adapters = models.ManyToManyField(
        Adapter, blank=True, help_text="Adapters, granted by name like models (a base's grant is not its adapters').",
    )
    revoked = models.BooleanField(default=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    requests_per_minute = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Empty = no limit."
    )
    tokens_per_minute = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Input tokens; empty = no limit."
    )
    tokens_per_day = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(1)], help_text="Input tokens per UTC day; empty = no limit."
    )
    priority = models.CharField(
        max_length=12, choices=PRIORITIES, default="interactive",
        help_text="batch: queued behind interactive traffic and shed first under overload.",
    )

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @classmethod
    def generate(cls) -> str:
        """A new random token string."""
        return "hst_" + secrets.token_urlsafe(32)

    def set_token(self, raw: str) -> None:
        """Store the hash of raw (the raw token is never kept)."""
        self.token_hash = hash_token(raw)
        self.prefix = raw[:10]

    def is_active(self) -> bool:
        """Not revoked and not expired."""
        return not self.revoked and (self.expires_at is None or self.expires_at > timezone.now())

    def scope(self) -> frozenset[str] | None:
        """The model and adapter names this token may use; None = every model and adapter."""
        if self.all_models:
            return None
        return frozenset([*(m.name for m in self.allowed_models.all()), *(a.name for a in self.allowed_adapters.all())])


def _models_added_limit_the_token(sender: type, instance: models.Model, action: str, reverse: bool,
                                  pk_set: set[int] | None, **_: object) -> None:
    """Models added to a token's list limit it to that list (whatever path added them: admin, command, code)."""
    if action != "post_add" or not pk_set:
        return
    tokens = ApiToken.objects.filter(pk__in=pk_set) if reverse else ApiToken.objects.filter(pk=instance.pk)
    tokens.update(all_models=False)
    if not reverse:
        instance.all_models = False  # type: ignore[attr-defined]


m2m_changed.connect(_models_added_limit_the_token, sender=ApiToken.allowed_models.through,
                    dispatch_uid="token-scope-from-models")
m2m_changed.connect(_models_added_limit_the_token, sender=ApiToken.allowed_adapters.through,
                    dispatch_uid="token-scope-from-adapters")
