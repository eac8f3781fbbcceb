"""One row's structured-output grammar: which tokens it may produce next, and the token it produced.

The grammar was compiled on the web (tasks.json_grammar); here it is instantiated for the
model's vocabulary (an llguidance matcher, about 1-2 ms at its first mask) and each step
fills a bitmask of the allowed tokens (a few microseconds; tens at a string's start) that
sets every other logit to -inf. Once the JSON is complete, only the end-of-sequence token
is allowed: the row ends at its next token, with finish_reason "stop".
"""

from __future__ import annotations

import llguidance
import torch

from models_registry.core.errors import InvalidInput
from models_registry.inference.token_vocabulary import Vocabulary

_SHIFTS = torch.arange(32, dtype=torch.int32)


class GrammarConstraint:
    """An llguidance matcher over one row's tokens."""

    def __init__(self, vocabulary: Vocabulary, grammar: str) -> None:
        self.vocabulary = vocabulary
        self.matcher = llguidance.LLMatcher(vocabulary.engine, grammar, log_level=0)
        if self.matcher.is_error():
            raise InvalidInput(f"the response_format schema cannot be used with this model: "
                               f"{self.matcher.get_error()}")
        self.bitmask = torch.full(((vocabulary.size + 31) // 32,), -1, dtype=torch.int32)

    def mask(self, logits: torch.Tensor) -> None:
        """Set the logits ([1, vocab]) of the tokens the grammar forbids now to -inf, in place."""
        if self.matcher.is_error():  # cannot happen for a token it allowed; end the row rather than fail it
            allowed = torch.zeros(logits.shape[-1], dtype=torch.bool)
            allowed[self.vocabulary.engine.eos_tokens] = True
        else:
            self.matcher.unsafe_compute_mask_ptr(self.bitmask.data_ptr(), self.bitmask.numel() * 4)
            allowed = ((self.bitmask.unsqueeze(-1) >> _SHIFTS) & 1).reshape(-1)[:logits.shape[-1]].bool()
        logits.masked_fill_(~allowed.to(logits.device), float("-inf"))

    def accept(self, token: int) -> None:
        """The row produced token."""
        self.matcher.consume_token(token)
