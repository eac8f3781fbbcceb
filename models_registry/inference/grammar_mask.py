"""One row's structured-output grammar: which tokens it may produce next, and the token it produced.

The grammar was compiled and checked on the web (tasks.json_grammar); here it is instantiated for the
model's vocabulary, once per tokenizer and grammar (an llguidance matcher: 1-2 ms for a small schema,
about 0.1 s at the web's bounds), and each row takes a copy (20 us), so n choices and a service that
sends one schema with every request compile it once. Each step fills a bitmask of the allowed tokens
(a few microseconds; tens at a string's start) that sets every other logit to -inf. Once the JSON is
complete, only the end-of-sequence token is allowed: the row ends at its next token, with
finish_reason "stop". A grammar the engine cannot go on with (its matcher errs: a limit of its parser
reached mid-answer, say) ends the row with GrammarStalled, a 400 its client reads (an error event
when streamed), never "stop" over unfinished JSON.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict

import llguidance
import numpy as np
import torch

from models_registry.core.errors import GrammarStalled, InvalidInput
from models_registry.inference.token_vocabulary import Vocabulary
from models_registry.tasks.json_grammar import engine_reason, quiet_limits

KEPT_PER_VOCABULARY = 32  # instantiated grammars kept per tokenizer

_kept: weakref.WeakKeyDictionary[Vocabulary, OrderedDict[str, llguidance.LLMatcher]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def fresh_matcher(vocabulary: Vocabulary, grammar: str) -> llguidance.LLMatcher:
    """A matcher of grammar over vocabulary at its start: a copy of the one built for them (built on first use)."""
    with _lock:
        kept = _kept.setdefault(vocabulary, OrderedDict())
        found = kept.get(grammar)
        if found is not None:
            kept.move_to_end(grammar)
            return found.deep_copy()
    built = llguidance.LLMatcher(vocabulary.engine, grammar, log_level=0, limits=quiet_limits())  # without the GIL
    with _lock:
        kept[grammar] = built
        while len(kept) > KEPT_PER_VOCABULARY:
            kept.popitem(last=False)
    return built.deep_copy()


class GrammarConstraint:
    """An llguidance matcher over one row's tokens."""

    def __init__(self, vocabulary: Vocabulary, grammar: str) -> None:
        self.vocabulary = vocabulary
        self.matcher = fresh_matcher(vocabulary, grammar)
        if self.matcher.is_error():
            raise InvalidInput(f"the response_format schema cannot be used with this model: "
                               f"{engine_reason(self.matcher.get_error())}")
        self.bitmask = np.full(((vocabulary.size + 31) // 32,), -1, dtype=np.int32)
        self.accepted = 0  # tokens the row produced under the grammar

    def mask(self, logits: torch.Tensor) -> None:
        """Set the logits ([1, vocab]) of the tokens the grammar forbids now to -inf, in place.

        GrammarStalled when the engine cannot go on (nothing is masked then: the row ends, it draws no token).
        On the CPU in numpy, one thread: torch's small ops over 50,000 logits go to its thread
        pool, where two threads on two busy cores waited up to 100 ms a step (measured).
        """
        if not self.matcher.is_error():
            self.matcher.unsafe_compute_mask_ptr(self.bitmask.ctypes.data, self.bitmask.nbytes)
        if self.matcher.is_error():
            raise GrammarStalled(f"the response_format schema cannot be followed to its end: the grammar engine "
                                 f"stopped after {self.accepted} generated tokens "
                                 f"({engine_reason(self.matcher.get_error())}); simplify the schema")
        size = logits.shape[-1]
        forbidden = np.unpackbits(self.bitmask.view(np.uint8), count=size, bitorder="little") == 0
        if logits.is_cpu:
            np.putmask(logits.numpy()[0], forbidden, -np.inf)
        else:
            logits.masked_fill_(torch.from_numpy(forbidden).to(logits.device), float("-inf"))

    def accept(self, token: int) -> None:
        """The row produced token."""
        self.matcher.consume_token(token)
        self.accepted += 1
