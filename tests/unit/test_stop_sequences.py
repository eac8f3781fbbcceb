"""streaming._stops: a stop sequence found in a growing text's tail exactly when it is in the whole text."""

from __future__ import annotations

import random

from models_registry.inference import streaming


def test_the_tail_search_finds_a_stop_exactly_when_the_whole_text_holds_it() -> None:
    rng = random.Random(52)
    alphabet = "ab \ufffd\n"
    for _ in range(3000):
        stops = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4))) for _ in range(rng.randint(1, 3))]
        before = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        if any(stop in before for stop in stops):
            continue  # a text that held a stop has ended: it grows no more
        # A token adds characters, or rewrites the end (a partial character completed), or the text is decoded again.
        kept = before if rng.random() < 0.7 else before[:rng.randint(0, len(before))]
        text = kept + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4)))
        assert streaming._stops(before, text, stops) == any(stop in text for stop in stops), (before, text, stops)
