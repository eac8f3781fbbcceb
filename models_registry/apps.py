"""App config of the model registry."""

from django.apps import AppConfig
from django.conf import settings


class ModelsRegistryConfig(AppConfig):
    """Registered models, their tasks, tokens and the inference machinery."""

    name = "models_registry"
    verbose_name = "Model registry"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Give a project without a channel layer ours, and register the fleet gauges with prometheus_client."""
        from models_registry.broker.work_layer import default_layer_config
        from models_registry.observe import metrics

        layers = getattr(settings, "CHANNEL_LAYERS", None) or {}
        if "default" not in layers:  # a project's own layer must be a HostingChannelLayer (work_layer checks)
            settings.CHANNEL_LAYERS = {**layers, "default": default_layer_config()}
        metrics.register_collectors()
