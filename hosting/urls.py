"""URL configuration: the API, the admin, the live metrics page, metrics."""

from django.contrib import admin
from django.urls import include, path

from models_registry.api import dashboard, metrics_view

urlpatterns = [
    path("", include("models_registry.urls")),
    path("admin/", admin.site.urls),
    path("dashboard/", dashboard.page, name="dashboard"),
    path("dashboard/data.json", dashboard.data, name="dashboard-data"),
    path("metrics", metrics_view.metrics, name="prometheus-django-metrics"),
]

handler404 = "models_registry.api.views.api_not_found"
handler500 = "models_registry.api.views.api_server_error"
