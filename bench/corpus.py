"""A fixed, seeded corpus of mixed-length English sentences (4-80 words, median about 11)."""

from __future__ import annotations

import math
import random

MIN_WORDS = 4
MAX_WORDS = 80
MEDIAN_WORDS = 11

_WORDS = """
the a an this that every some many few our their my your his her its one two three
people time year way day man woman child world life hand part place case week company
system program question work government number night point home water room mother area
money story fact month lot right study book eye job word business issue side kind head
house service friend father power hour game line end member law car city community name
president team minute idea kid body information back parent face others level office door
health person art war history party result change morning reason research girl guy moment
air teacher force education model server language network river garden window kitchen
is was be have do say get make go know take see come think look want give use find tell
ask work seem feel try leave call keep let begin help talk turn start show hear play run
move like live believe hold bring happen write provide sit stand lose pay meet include
continue set learn lead understand watch follow stop create speak read allow add spend grow
open walk win offer remember love consider appear buy wait serve die send expect build stay
good new first last long great little own other old right big high different small large
next early young important few public bad same able quick lazy bright quiet happy simple
in on at by for with about against between into through during before after above below
to from up down over under again further then once here there when where why how all both
and but or so because while although if unless until since yet also very often never always
""".split()


def _length(rng: random.Random) -> int:
    """A sentence length in words: log-normal around the median, clipped to 4-80."""
    words = round(math.exp(rng.gauss(math.log(MEDIAN_WORDS), 0.6)))
    return min(MAX_WORDS, max(MIN_WORDS, words))


def _sentence(rng: random.Random, words: int) -> str:
    """One sentence of exactly `words` words, capitalised, with a comma now and then."""
    chosen = [rng.choice(_WORDS) for _ in range(words)]
    for i in range(6, words - 2, rng.randint(7, 12)):
        chosen[i] += ","
    text = " ".join(chosen)
    return text[0].upper() + text[1:] + rng.choice(".....?!")


def build_corpus(size: int, seed: int = 20240611) -> list[str]:
    """`size` sentences in arrival (unsorted) order; the same seed gives the same corpus."""
    rng = random.Random(seed)
    sentences = [_sentence(rng, _length(rng)) for _ in range(size)]
    for length in (MIN_WORDS, MAX_WORDS):  # both extremes always occur
        if size >= 2:
            sentences[rng.randrange(size)] = _sentence(rng, length)
    return sentences


def describe(sentences: list[str]) -> dict[str, float]:
    """Word-count statistics of a corpus."""
    counts = sorted(len(s.split()) for s in sentences)
    return {"size": len(counts), "min_words": counts[0], "median_words": counts[len(counts) // 2],
            "max_words": counts[-1], "mean_words": round(sum(counts) / len(counts), 2)}
