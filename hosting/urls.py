"""URL configuration: the API, the admin, metrics."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("", include("models_registry.urls")),
    path("admin/", admin.site.urls),
    path("", include("django_prometheus.urls")),
]

handler404 = "models_registry.views.api_not_found"
handler500 = "models_registry.views.api_server_error"
