"""api.openai.call_scanner: a call's name, then its arguments piece by piece, joined exactly as written."""

from __future__ import annotations

import json

import pytest

from models_registry.api.openai.call_scanner import CallScanner, JsonSpan

ARGUMENTS = '{"city":"Paris {not a brace} [nor this]","unit":"c\\"}\\\\","days":{"n":[3,{"m":"\\\\\\""}]},"e":"é"}'
CALL = '{"name":"get_weather","arguments":' + ARGUMENTS + '}'


def _fed(text: str, cuts: list[int]) -> tuple[list[str | None], str, str | None]:
    """(the names read, the arguments joined, the rest) of text fed cut at cuts."""
    scanner, names, joined, rest = CallScanner(), [], "", None
    for start, end in zip([0, *cuts], [*cuts, len(text)]):
        read = scanner.feed(text[start:end])
        names.append(read.name)
        joined += read.arguments
        if read.rest is not None:  # once closed, all that is fed is the rest
            rest = (rest or "") + read.rest
    return [n for n in names if n is not None], joined, rest


def test_the_arguments_are_valid_json_with_braces_and_escapes_in_strings() -> None:
    assert json.loads(ARGUMENTS)["unit"] == 'c"}\\'


@pytest.mark.parametrize("at", range(len(CALL) + 6))
def test_cut_at_every_position_the_pieces_join_to_the_arguments(at: int) -> None:
    text = CALL + "\n</tool_call>"
    names, joined, rest = _fed(text, [min(at, len(text))])
    assert names == ["get_weather"] and joined == ARGUMENTS and rest == "\n</tool_call>"


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_fed_a_character_at_a_time_or_more(size: int) -> None:
    text = CALL + "; {"
    names, joined, rest = _fed(text, list(range(size, len(text), size)))
    assert names == ["get_weather"] and joined == ARGUMENTS and rest == "; {"


def test_the_arguments_arrive_before_the_call_is_whole() -> None:
    scanner = CallScanner()
    assert scanner.feed('{"name": "f", ').name is None
    read = scanner.feed('"parameters": {"a": ')
    assert (read.name, read.arguments) == ("f", '{"a": ')
    assert scanner.feed('"1}').arguments == '"1}'
    read = scanner.feed('"} } trailing')
    assert (read.arguments, read.rest) == ('"}', " trailing") and scanner.closed
    assert scanner.arguments == '{"a": "1}"}'


def test_a_head_of_another_shape_releases_nothing_until_it_closes() -> None:
    scanner = CallScanner()
    read = scanner.feed('{"arguments": {"a": 1}, "name": "f"}, more')
    assert (read.name, read.arguments, read.rest) == (None, "", ", more")
    assert scanner.text == '{"arguments": {"a": 1}, "name": "f"}'


def test_an_escaped_name_is_decoded() -> None:
    read = CallScanner().feed('{"name": "a\\u0062c", "arguments": []}')
    assert (read.name, read.arguments, read.rest) == ("abc", "[]", "")


def test_a_span_closes_at_its_own_bracket() -> None:
    span = JsonSpan()
    assert span.feed('[1, "]", {"x": "\\"]"') == len('[1, "]", {"x": "\\"]"')
    assert span.feed("}]tail") == 2 and span.closed and span.feed("more") == 0
