"""api.openai.reasoning_split: an answer's `<think>` block apart from its content, whole and fed piece by piece."""

from __future__ import annotations

import pytest

from models_registry.api.openai.reasoning_split import Pieces, ReasoningSplitter
from models_registry.tasks.task_parameters import ReasoningFormat


def split(pieces: list[str], reasoning_format: ReasoningFormat) -> tuple[list[Pieces], str, str]:
    """Every release, and the reasoning and content they add up to."""
    splitter = ReasoningSplitter(reasoning_format)
    released = [splitter.feed(piece) for piece in pieces] + [splitter.finish()]
    return released, "".join(p.reasoning for p in released), "".join(p.content for p in released)


def every_cut(text: str) -> list[list[str]]:
    """text in two pieces at every place, and one character a piece."""
    return [[text[:at], text[at:]] for at in range(len(text) + 1)] + [list(text)]


@pytest.mark.parametrize(("text", "reasoning", "content"), [
    ("<think>\nLet me see.\n</think>\n\nParis.", "Let me see.", "Paris."),
    ("Paris.", "", "Paris."),  # no think block: all content
    ("<think>\nstill thinking when max_tokens ran out", "still thinking when max_tokens ran out", ""),
    ("Sure. <think>why</think> Paris.", "why", "Sure. Paris."),  # text before <think> is content
    ("<think>a</think>b <think>c</think>", "a", "b <think>c</think>"),  # only the first block is reasoning
    ("a < b and <thin ice", "", "a < b and <thin ice"),  # a tag's start that never became one
    ("<think></think>Paris.", "", "Paris."),  # thinking switched off: an empty block
])
def test_think_splits_the_same_however_the_text_is_cut(text: str, reasoning: str, content: str) -> None:
    for pieces in every_cut(text):
        assert split(pieces, "think")[1:] == (reasoning, content), pieces


@pytest.mark.parametrize(("text", "reasoning", "content"), [
    ("\nLet me see.\n</think>\n\nParis.", "Let me see.", "Paris."),  # the prompt opened the block
    ("<think>\nLet me see.</think>Paris.", "Let me see.", "Paris."),  # the model wrote <think> again
    ("thinking until max_tokens", "thinking until max_tokens", ""),  # never closed: all reasoning
    ("a <b> c</think>d", "a <b> c", "d"),
])
def test_think_open_starts_in_the_reasoning(text: str, reasoning: str, content: str) -> None:
    for pieces in every_cut(text):
        assert split(pieces, "think-open")[1:] == (reasoning, content), pieces


def test_none_leaves_the_text_alone() -> None:
    assert split(["<think>a", "</think>b"], "none")[1:] == ("", "<think>a</think>b")


def test_only_what_could_still_be_a_tag_is_held_back() -> None:
    splitter = ReasoningSplitter("think")
    assert splitter.feed("Hi <") == Pieces(content="Hi ")  # "<" may open <think>
    assert splitter.feed("b") == Pieces(content="<b")  # it did not
    assert splitter.feed("<th") == Pieces()
    assert splitter.feed("ink>I wonder </") == Pieces(reasoning="I wonder")  # the space may precede </think>
    assert splitter.feed("thinking") == Pieces(reasoning=" </thinking")  # not the tag after all
    assert splitter.feed("</think>") == Pieces()
    assert splitter.feed(" Done") == Pieces(content="Done")
    assert splitter.feed(" <think>") == Pieces(content=" <think>")  # past the block nothing is held
    assert splitter.finish() == Pieces()


def test_an_unclosed_block_is_released_as_reasoning_at_the_end() -> None:
    released, reasoning, content = split(["<think>", "Hmm </th"], "think")
    assert released[-1] == Pieces(reasoning=" </th")
    assert (reasoning, content) == ("Hmm </th", "")
