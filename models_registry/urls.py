"""Routes of the HTTP API."""

from django.urls import path

from models_registry import views

urlpatterns = [
    path("models", views.model_list, name="model-list"),
    path("models/<slug:name>", views.model_endpoint, name="model"),
    path("models/<slug:name>/<slug:task>", views.model_endpoint, name="model-task"),
    path("health", views.health, name="health"),
    path("ready", views.ready, name="ready"),
]
