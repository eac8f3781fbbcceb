"""payloads.parse_body on JSON text that json.loads accepts but a worker message cannot carry."""

from __future__ import annotations

import pytest

from models_registry.api.errors import InvalidInput
from models_registry.api.payloads import parse_body


@pytest.mark.parametrize("body", [rb'{"inputs": "\ud800"}', rb'{"inputs": ["ok", "x\uDFFFy"]}',
                                  rb'{"inputs": "x", "parameters": {"prompt": "\udbff"}}'])
def test_a_lone_surrogate_escape_is_a_400_not_a_broker_error(body: bytes) -> None:
    with pytest.raises(InvalidInput, match="unpaired UTF-16 surrogate"):
        parse_body(body, "application/json", 1000)


def test_paired_surrogate_escapes_are_the_character_they_spell() -> None:
    assert parse_body(rb'{"inputs": "\ud83d\ude00"}', "application/json", 1000) == {"inputs": "\U0001F600"}


def test_an_escaped_backslash_before_u_is_not_a_surrogate() -> None:
    assert parse_body(rb'{"inputs": "\\ud800"}', "application/json", 1000) == {"inputs": "\\ud800"}


def test_curl_d_json_is_checked_too() -> None:
    with pytest.raises(InvalidInput, match="surrogate"):
        parse_body(rb'{"inputs": "\ud800"}', "application/x-www-form-urlencoded", 1000)
