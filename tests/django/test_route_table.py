"""A route is declared once, in api.server.route_table.ROUTES: the front door, batch-job lines and Django's URLconf
all serve that entry, through the same skeleton."""

from __future__ import annotations

import pytest
from django.urls import resolve

from models_registry.api.server import route_table
from models_registry.core import paths

EXAMPLE = {"name": "minilm", "task": "embed"}


@pytest.mark.parametrize("name", sorted(route_table.ROUTES))
def test_every_declared_route_is_served_the_same_way_by_the_front_door_and_by_django(name: str) -> None:
    parameters = {key: EXAMPLE[key] for key in paths.PARAMETER.findall(paths.ROUTES[name])}
    path = paths.url_path(name, **parameters)
    declared = route_table.ROUTES[name]
    matched = route_table.match(path)
    assert matched is not None and matched[0] is declared and matched[1] == parameters
    view = resolve(path).func
    assert view.route is declared  # type: ignore[attr-defined]  # Django's view is made from the same entry


def test_no_other_path_is_an_inference_route() -> None:
    for name in set(paths.ROUTES) - set(route_table.ROUTES):
        path = paths.url_path(name, **{key: "x" for key in paths.PARAMETER.findall(paths.ROUTES[name])})
        assert route_table.match(path) is None, name
        assert not hasattr(resolve(path).func, "route"), name
