"""payloads.parse_body on JSON text that json.loads accepts but a worker message cannot carry."""

from __future__ import annotations

import pytest

from models_registry.api.hf.payloads import parse_body
from models_registry.core.errors import InvalidInput


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


@pytest.mark.parametrize("body", [b'{"inputs": "x", "parameters": {"top_k": 100000000000000000000000000000}}',
                                  b'{"inputs": "x", "parameters": {"top_k": -18446744073709551617}}'])
def test_an_integer_beyond_64_bits_is_refused_not_read_as_a_float(body: bytes) -> None:
    with pytest.raises(InvalidInput, match="64 bits"):  # orjson alone would read it as 1e+29
        parse_body(body, "application/json", 1000)


def test_what_orjson_refuses_is_still_read_as_json_reads_it() -> None:
    assert parse_body(b'{"inputs": "x", "parameters": {"t": NaN}}', "application/json", 1000)["parameters"]["t"] != 0
    assert parse_body(b'{"inputs": 1e400}', "application/json", 1000) == {"inputs": float("inf")}
