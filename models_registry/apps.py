"""App config of the model registry."""

from django.apps import AppConfig


class ModelsRegistryConfig(AppConfig):
    """Registered models, their tasks, tokens and the inference machinery."""

    name = "models_registry"
    verbose_name = "Model registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the fleet gauges (queue depth, live workers) with prometheus_client."""
        from models_registry.observe import metrics

        metrics.register_collectors()
