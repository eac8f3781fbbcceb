"""One row's structured-output grammar: which tokens it may produce next, and the token it produced.

The grammar was compiled on the web (tasks.json_grammar); here it is instantiated for the
model's vocabulary (an llguidance matcher, about 1-2 ms at its first mask) and each step
fills a bitmask of the allowed tokens (a few microseconds; tens at a string's start) that
sets every other logit to -inf. Once the JSON is complete, only the end-of-sequence token
is allowed: the row ends at its next token, with finish_reason "stop".
"""

from __future__ import annotations

import llguidance
import numpy as np
import torch

from models_registry.core.errors import InvalidInput
from models_registry.inference.token_vocabulary import Vocabulary



class GrammarConstraint:
    """An llguidance matcher over one row's tokens."""

    def __init__(self, vocabulary: Vocabulary, grammar: str) -> None:
        self.vocabulary = vocabulary
        self.matcher = llguidance.LLMatcher(vocabulary.engine, grammar, log_level=0)
        if self.matcher.is_error():
            raise InvalidInput(f"the response_format schema cannot be used with this model: "
                               f"{self.matcher.get_error()}")
        self.bitmask = np.full(((vocabulary.size + 31) // 32,), -1, dtype=np.int32)

    def mask(self, logits: torch.Tensor) -> None:
        """Set the logits ([1, vocab]) of the tokens the grammar forbids now to -inf, in place.

        On the CPU in numpy, one thread: torch's small ops over 50,000 logits go to its thread
        pool, where two threads on two busy cores waited up to 100 ms a step (measured).
        """
        size = logits.shape[-1]
        if self.matcher.is_error():  # cannot happen for a token it allowed; end the row rather than fail it
            forbidden = np.ones(size, dtype=bool)
            forbidden[self.vocabulary.engine.eos_tokens] = False
        else:
            self.matcher.unsafe_compute_mask_ptr(self.bitmask.ctypes.data, self.bitmask.nbytes)
            forbidden = np.unpackbits(self.bitmask.view(np.uint8), count=size, bitorder="little") == 0
        if logits.is_cpu:
            np.putmask(logits.numpy()[0], forbidden, -np.inf)
        else:
            logits.masked_fill_(torch.from_numpy(forbidden).to(logits.device), float("-inf"))

    def accept(self, token: int) -> None:
        """The row produced token."""
        self.matcher.consume_token(token)
