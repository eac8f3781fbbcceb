"""The error hierarchy: its JSON shape, statuses, headers, and errors rebuilt from the wire."""

from __future__ import annotations

import json

import pytest

from models_registry.api.pipeline.error_answers import error_response
from models_registry.core import errors
from models_registry.core.errors import (
    Forbidden,
    HostingError,
    Internal,
    InvalidInput,
    MethodNotAllowed,
    NotFound,
    Overloaded,
    Timeout,
    TooLarge,
    Unauthorized,
    Unavailable,
    from_wire,
)

# SPEC "Errors": every error_type a client may see and its HTTP status.
SPEC_TABLE = {
    "invalid_input": (InvalidInput, 400),
    "unauthorized": (Unauthorized, 401),
    "forbidden": (Forbidden, 403),
    "not_found": (NotFound, 404),
    "too_large": (TooLarge, 413),
    "overloaded": (Overloaded, 503),
    "unavailable": (Unavailable, 503),
    "timeout": (Timeout, 504),
    "internal": (Internal, 500),
}


@pytest.mark.parametrize(("error_type", "cls", "status"), [(k, c, s) for k, (c, s) in SPEC_TABLE.items()])
def test_error_response_has_the_spec_shape_and_status(error_type: str, cls: type[HostingError], status: int) -> None:
    response = error_response(cls("something went wrong"))
    assert response.status_code == status
    assert response["Content-Type"] == "application/json"
    assert json.loads(response.content) == {"error": "something went wrong", "error_type": error_type}


def test_error_response_carries_the_request_id() -> None:
    response = error_response(NotFound("no such model"), request_id="abc-123")
    assert response["X-Request-Id"] == "abc-123"


def test_error_response_without_a_request_id_sets_no_header() -> None:
    response = error_response(NotFound("no such model"))
    assert not response.has_header("X-Request-Id")


def test_error_headers_such_as_retry_after_reach_the_response() -> None:
    response = error_response(Overloaded("queue full", headers={"Retry-After": "2"}), request_id="r1")
    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    assert response["X-Request-Id"] == "r1"


def test_errors_do_not_share_a_headers_dict() -> None:
    first = Overloaded("a")
    first.headers["Retry-After"] = "1"
    assert Overloaded("b").headers == {}


def test_method_not_allowed_is_a_405() -> None:
    response = error_response(MethodNotAllowed("use POST"))
    assert response.status_code == 405
    assert json.loads(response.content)["error_type"] == "method_not_allowed"


def test_message_is_kept_as_given() -> None:
    error = InvalidInput("parameter 'top_k' must be an integer from 1 to 100")
    assert error.message == str(error) == "parameter 'top_k' must be an integer from 1 to 100"


@pytest.mark.parametrize(("error_type", "cls", "status"), [(k, c, s) for k, (c, s) in SPEC_TABLE.items()])
def test_from_wire_rebuilds_every_spec_error_type(error_type: str, cls: type[HostingError], status: int) -> None:
    error = from_wire(error_type, "from the worker")
    assert type(error) is cls
    assert error.status == status
    assert error.error_type == error_type
    assert error.message == "from the worker"


def test_every_error_class_is_in_the_wire_table() -> None:
    subclasses = set(HostingError.__subclasses__())
    assert subclasses == set(errors.ERROR_CLASSES.values())
    for error_type, cls in errors.ERROR_CLASSES.items():
        assert cls.error_type == error_type


@pytest.mark.parametrize("error_type", ["segfault", "", "INVALID_INPUT"])
def test_from_wire_maps_unknown_types_to_internal(error_type: str) -> None:
    error = from_wire(error_type, "weird")
    assert type(error) is Internal
    assert error.status == 500
    assert error.message == "weird"


def test_from_wire_gives_a_fresh_error_each_time() -> None:
    first = from_wire("overloaded", "full")
    first.headers["Retry-After"] = "1"
    assert from_wire("overloaded", "full").headers == {}


def test_a_disabled_model_is_one_error_with_one_message() -> None:
    from models_registry.core.errors import ModelDisabled

    error = ModelDisabled("mini")
    assert isinstance(error, Unavailable) and (error.status, error.error_type) == (503, "unavailable")
    assert error.message == "model 'mini' is disabled"
