"""What a row's OpenAI options change at the point its logits become its next token (one row, no batch state).

`mask` runs on the row's logits before its sampling processors: a structured-output row's
grammar forbids tokens there (inference.grammar_mask), and a row that reports logprobs
keeps the log-softmax of those logits. `chosen` runs once the token is picked: the grammar
takes it, and the token's logprob entry (its bytes, logprob and top alternatives) is what
the row's stream event carries.

Which distribution the logprobs are: the model's own (raw) log-softmax, as OpenAI's and
vLLM's by default, before temperature, top-p/top-k and the repetition penalty; for a
structured-output row, after the grammar's mask (a forbidden token's logprob is -inf: it
could not be drawn). They are computed from the very logits the token was drawn from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from models_registry.inference.token_vocabulary import Vocabulary, vocabulary

FLOOR = -9999.0  # OpenAI's logprob for a token that cannot be drawn (JSON has no -inf)


@dataclass(eq=False)
class RowShaping:
    """One row's logprobs (how many alternatives) and grammar."""

    vocabulary: Vocabulary
    top_logprobs: int | None = None  # None: no logprobs
    constraint: Any = None  # a grammar_mask.GrammarConstraint
    logprobs: torch.Tensor | None = None  # [1, vocab] of the step's logits, kept by mask()

    @classmethod
    def of(cls, tokenizer: Any, size: int, eos: set[int], params: dict[str, Any]) -> RowShaping | None:
        """The shaping params ask for (None when they ask for none); 400 when the model cannot give it."""
        top = params.get("logprobs")
        grammar = params.get("grammar")
        if top is None and not grammar:
            return None
        shaping = cls(vocabulary(tokenizer, size, eos), top_logprobs=top)
        if grammar:
            from models_registry.inference.grammar_mask import GrammarConstraint

            shaping.constraint = GrammarConstraint(shaping.vocabulary, grammar)
        return shaping

    def mask(self, logits: torch.Tensor) -> None:
        """Before sampling: the grammar's forbidden tokens to -inf (in place); keep the logprobs if asked."""
        if self.constraint is not None:
            self.constraint.mask(logits)
        if self.top_logprobs is not None:
            self.logprobs = torch.log_softmax(logits, dim=-1)

    def chosen(self, token: int) -> dict[str, Any] | None:
        """After sampling: the grammar takes token; the extras of its stream event (its logprobs), if any."""
        if self.constraint is not None:
            self.constraint.accept(token)
        if self.top_logprobs is None or self.logprobs is None:
            return None
        row = self.logprobs[0]
        entry: dict[str, Any] = {"logprob": _finite(float(row[token])), "bytes": self.vocabulary.token_bytes(token),
                                 "top": []}
        if self.top_logprobs:
            values, ids = row.topk(min(self.top_logprobs, row.shape[-1]))
            entry["top"] = [[self.vocabulary.token_bytes(int(i)), _finite(float(v))]
                            for v, i in zip(values.tolist(), ids.tolist())]
        self.logprobs = None
        return {"logprobs": entry}


def _finite(value: float) -> float:
    return value if math.isfinite(value) else FLOOR
