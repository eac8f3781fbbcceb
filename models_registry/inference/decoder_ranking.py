"""Decoder rerankers (Qwen3-Reranker style): a causal LM scored by two tokens' logits at a pair's last position.

As sentence-transformers 6 computes a CrossEncoder of a text-generation Transformer and a LogitScore
module: the pair becomes the messages `query` and `document` (after a `system` message holding the
files' default prompt), which the tokenizer's chat template renders; a rendering over the model's
length is cut and the template's tail written back over its end, so the last position is still the
template's; rows are left-padded, and the score is logit(true) - logit(false) there (logit(true)
alone without a false token). A directory without modules.json whose model is a *ForCausalLM is
scored by its "yes" and "no" tokens, as sentence-transformers does.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import AutoModelForCausalLM

from models_registry.core.errors import InvalidInput
from models_registry.core.model_layout import ModelLayout, UnsupportedLayout

# sentence-transformers' InputFormatter: model types whose templates its heuristic misjudges, and the
# template fragments that mean message content is a list of typed parts.
FLAT_MODEL_TYPES = ("apertus", "deepseek_v3", "gpt_oss", "seed_oss")
STRUCTURED_MARKS = ("content[0]", ".type", "'type'", '"type"', "item.type", "message.content[")
# Two fillers that tokenize differently: the renders' common tail is the template's, never content.
SKELETON_FILLERS = ("0", "1 2 3 4")
ROLE_PROBES = (("alpha", "bravo"), ("charlie", "bravo"), ("alpha", "foxtrot"))


@dataclass
class DecoderRanker:
    """A causal LM and its left-padding tokenizer, the tokens it is scored by, and how a pair is rendered."""

    model: Any
    tokenizer: Any
    true_id: int
    false_id: int | None
    limit: int  # the most tokens of a rendered pair
    prompt: str = ""  # the files' default prompt (a system message; prefixed to the query without a template)
    message_format: str | None = None  # "flat", "structured"; None: tokenizer pairs, no chat template
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    suffix: list[int] = field(default_factory=list)  # the template's tail, written back over a cut rendering
    forward_kwargs: dict[str, Any] = field(default_factory=dict)

    def score(self, padded: dict[str, torch.Tensor]) -> torch.Tensor:
        """Each row's score from the logits at its last position (left padding: a real token)."""
        logits = self.model(**padded, **self.forward_kwargs).logits[:, -1].float()
        scores = logits[:, self.true_id]
        return scores if self.false_id is None else scores - logits[:, self.false_id]


def logit_tokens(layout: ModelLayout, config: Any, tokenizer: Any) -> tuple[int, int | None] | None:
    """The (true, false) tokens a decoder reranker is scored by; None for a one-logit cross-encoder."""
    if layout.logit_tokens is not None:
        if layout.transformer_task != "text-generation":
            raise UnsupportedLayout(f"a LogitScore module over a Transformer of transformer_task "
                                    f"{layout.transformer_task or 'unset'!r} is not served: text-ranking scores a "
                                    "causal LM's tokens ('text-generation' in sentence_bert_config.json)")
        return layout.logit_tokens
    if layout.transformer_task == "text-generation":
        raise UnsupportedLayout("modules.json has a causal-LM Transformer but no LogitScore module, so nothing "
                                "says which tokens score a pair: add one (its true_token_id and false_token_id)")
    if layout.kind or not any(name.endswith("ForCausalLM") for name in (config.architectures or [])[:1]):
        return None
    true_id, false_id = (tokenizer.convert_tokens_to_ids(token) for token in ("yes", "no"))
    if true_id is None or false_id is None:
        raise UnsupportedLayout("a causal LM without modules.json is scored by its 'yes' and 'no' tokens, which "
                                "this tokenizer lacks: add a LogitScore module naming the tokens")
    return true_id, false_id


def load(source: str, revision: str | None, device: str, dtype: Any, tokenizer: Any, layout: ModelLayout,
         tokens: tuple[int, int | None]) -> DecoderRanker:
    """The causal LM on device with what its files say about rendering and length (blocking, may raise)."""
    model = AutoModelForCausalLM.from_pretrained(source, revision=revision, dtype=dtype).to(device).eval()
    tokenizer.padding_side = "left"  # every row's last position is its own last token
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    positions = getattr(model.config, "max_position_embeddings", None)
    limit = layout.max_seq_length or tokenizer.model_max_length
    if layout.max_seq_length is None and isinstance(positions, int) and positions > 0:
        limit = min(limit, positions)  # sentence-transformers caps the tokenizer's length at the positions
    tokenizer.model_max_length = limit
    template_kwargs = dict(layout.chat_template_kwargs)
    restore_suffix = template_kwargs.pop("restore_suffix", True)
    for size_key in ("padding", "truncation", "return_tensors"):  # the forward pads and cuts itself
        template_kwargs.pop(size_key, None)
    limit = int(template_kwargs.pop("max_length", None) or limit)
    accepted = inspect.signature(model.forward).parameters
    ranker = DecoderRanker(model=model, tokenizer=tokenizer, true_id=tokens[0], false_id=tokens[1], limit=limit,
                           prompt=layout.prompts.get(layout.default_prompt_name or "", ""),
                           message_format=_message_format(layout, tokenizer, model.config.model_type),
                           template_kwargs=template_kwargs,
                           forward_kwargs={"logits_to_keep": 1} if "logits_to_keep" in accepted else {})
    if ranker.message_format is not None:
        _check_roles(ranker)
        ranker.suffix = _template_suffix(ranker) if restore_suffix else []
    return ranker


def render(ranker: DecoderRanker, pairs: list[dict[str, str]], params: dict[str, Any]) -> list[list[int]]:
    """Each pair's token ids as the chat template renders it, cut to the model's length with its tail restored."""
    rendered = _tokenize(ranker, [_messages(ranker, pair["query"], pair["text"]) for pair in pairs])
    longest = max(len(ids) for ids in rendered)
    if params.get("truncate") is False and longest > ranker.limit:
        raise InvalidInput(f"a (query, text) pair renders to {longest} tokens, over the model's {ranker.limit}, "
                           "and truncate is false")
    keep_end = (params.get("truncation_direction") or "right").lower() == "left"
    cut = []
    for ids in rendered:
        if len(ids) >= ranker.limit:  # (as sentence-transformers: a row at the limit gets the tail too)
            ids = ids[-ranker.limit:] if keep_end else ids[:ranker.limit]
            if ranker.suffix:
                tail = ranker.suffix[-ranker.limit:]
                ids = ids[:len(ids) - len(tail)] + tail
        cut.append(ids)
    return cut


def _messages(ranker: DecoderRanker, query: str, text: str, system: bool = True) -> list[dict[str, Any]]:
    roles = ([("system", ranker.prompt)] if ranker.prompt and system else []) + [("query", query), ("document", text)]
    if ranker.message_format == "flat":
        return [{"role": role, "content": content} for role, content in roles]
    return [{"role": role, "content": [{"type": "text", "text": content}]} for role, content in roles]


def _tokenize(ranker: DecoderRanker, conversations: list[list[dict[str, Any]]]) -> list[list[int]]:
    return ranker.tokenizer.apply_chat_template(conversations, tokenize=True, return_dict=True,
                                                **ranker.template_kwargs)["input_ids"]


def _message_format(layout: ModelLayout, tokenizer: Any, model_type: str) -> str | None:
    """How the pair's messages carry their text; None where the Transformer renders no messages."""
    template = tokenizer.chat_template
    modalities = layout.modalities or (("text", "message") if template else ("text",))
    if "message" not in modalities:
        return None
    if layout.message_format:
        return layout.message_format
    if model_type in FLAT_MODEL_TYPES:
        return "flat"
    if not isinstance(template, str) or any(mark in template for mark in STRUCTURED_MARKS):
        return "structured"
    return "flat"


def _check_roles(ranker: DecoderRanker) -> None:
    """Refuse at load a chat template that drops the query or the document (as sentence-transformers does)."""
    try:
        base, *varied = [ranker.tokenizer.apply_chat_template(_messages(ranker, *pair, system=False), tokenize=False,
                                                              **ranker.template_kwargs) for pair in ROLE_PROBES]
    except Exception as error:  # noqa: BLE001 - any template failure is the operator's to fix
        raise UnsupportedLayout(f"the chat template cannot render a (query, document) pair: "
                                f"{type(error).__name__}: {error}") from None
    dropped = [role for role, render_ in zip(("query", "document"), varied) if render_ == base]
    if dropped:
        raise UnsupportedLayout(f"the chat template does not render the {' and '.join(dropped)} of a pair: give "
                                "the model a template that reads the 'query' and 'document' roles")


def _template_suffix(ranker: DecoderRanker) -> list[int]:
    """The template's token tail after the document: the common tail of two renders with different fillers."""
    first, second = _tokenize(ranker, [
        [m if m["role"] == "system" else {**m, "content": filler if isinstance(m["content"], str)
                                          else [{"type": "text", "text": filler}]}
         for m in _messages(ranker, "", "")] for filler in SKELETON_FILLERS])
    count = 0
    for left, right in zip(reversed(first), reversed(second)):
        if left != right:
            break
        count += 1
    return first[len(first) - count:] if 0 < count < min(len(first), len(second)) else []
