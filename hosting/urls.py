"""URL configuration: the admin and the app's routes (the API, the dashboard, /metrics), as any project's."""

from django.contrib import admin
from django.urls import include, path

from models_registry.core import paths

# This install's admin is the product's: its name, and a "View site" link that opens the live metrics.
admin.site.site_header = "Model hosting"
admin.site.site_title = "Model hosting admin"
admin.site.site_url = paths.url_path("dashboard")

urlpatterns = [
    path("admin/", admin.site.urls),
]
urlpatterns += [path("", include("models_registry.urls"))]

# This install answers no page of its own: an unknown path or a server error gets the API's JSON error.
handler404 = "models_registry.api.server.django_views.api_not_found"
handler500 = "models_registry.api.server.django_views.api_server_error"
