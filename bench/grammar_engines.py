"""`python -m bench.grammar_engines`: the per-step cost of structured output's grammar engines on the CPU.

Why the product uses llguidance (docs/generation.md): each engine constrains the same JSON
(a 7-property schema and any JSON object, compact: no free whitespace) over a 50,257-token
byte-level BPE (GPT-2's size with real merges, trained here on this machine's Python
sources, since no tokenizer can be downloaded), on one core. Measured: the tokenizer's
setup, the compile, the first mask, then the mask of every step of a forced document and of
a 300-step walk driven by random logits (mostly inside strings, the costly state), and the
cost of setting the forbidden logits to -inf (as the product does it, in numpy). xgrammar and outlines-core are installed
(pinned, without their dependencies) into bench-results/grammar-engines/ on first use.
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from models_registry.inference.token_vocabulary import byte_decoder

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "bench-results" / "grammar-engines"
PEERS = ["xgrammar==0.2.8", "apache-tvm-ffi==0.1.15.post2", "outlines-core==0.2.14"]
VOCAB = 50257
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}, "email": {"type": "string"},
    "active": {"type": "boolean"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                                                 "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["street", "city", "zip"], "additionalProperties": False},
    "kind": {"enum": ["person", "company", "other"]}},
    "required": ["name", "age", "email", "active", "tags", "address", "kind"], "additionalProperties": False}
DOC = {"name": "Ada Lovelace, the first programmer of the analytical engine", "age": 36, "email": "ada@example.org",
       "active": True, "tags": ["math", "poetry", "engines of the future"],
       "address": {"street": "12 St James's Square", "city": "London", "zip": "12345"}, "kind": "person"}
ANY_DOC = {"a": [1, 2.5, "x y z"], "b": {"c": None, "d": "some longer text here"}}


def peers_on_path() -> None:
    """xgrammar and outlines-core from bench-results/ (installed once, no dependencies: torch is ours)."""
    target = HOME / "site"
    if not (target / ".installed").is_file():
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target),
                        *PEERS], check=True)
        (target / ".installed").touch()
    sys.path.insert(0, str(target))


def tokenizer() -> Any:
    """A 50,257-token byte-level BPE trained on the local Python sources (cached in bench-results/)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    where = HOME / "tokenizer"
    if not (where / "tokenizer.json").is_file():
        files = sorted(glob.glob(sysconfig.get_paths()["stdlib"] + "/**/*.py", recursive=True))

        def texts() -> Any:
            total = 0
            for name in files:
                try:
                    text = Path(name).read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
                total += len(text)
                if total > 60_000_000:
                    return
                yield text

        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        bpe.train_from_iterator(texts(), trainer=trainers.BpeTrainer(
            vocab_size=VOCAB, special_tokens=["<|endoftext|>"], show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        bpe.post_processor = processors.ByteLevel(trim_offsets=False)
        PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>").save_pretrained(str(where))
    return AutoTokenizer.from_pretrained(str(where))


def measure(name: str, tok: Any, setup: Any) -> list[dict[str, Any]]:
    """Every measure of one engine: setup() gives (compile(schema) -> grammar, matcher(grammar), fill, accept)."""
    import numpy as np
    import torch

    started = time.perf_counter()
    compile_, new_matcher, fill, accept = setup(tok)
    setup_s = time.perf_counter() - started
    rows = []
    for label, schema, doc in (("schema", SCHEMA, DOC), ("json_object", {"type": "object"}, ANY_DOC)):
        started = time.perf_counter()
        grammar = compile_(schema)
        compile_s = time.perf_counter() - started
        bitmask = torch.full(((VOCAB + 31) // 32,), -1, dtype=torch.int32)
        started = time.perf_counter()
        matcher = new_matcher(grammar)
        fill(matcher, bitmask)
        first_s = time.perf_counter() - started
        forced = []
        for token in tok(json.dumps(doc, separators=(",", ":")))["input_ids"]:
            started = time.perf_counter()
            fill(matcher, bitmask)
            forced.append(time.perf_counter() - started)
            accept(matcher, token)
        generator = torch.Generator().manual_seed(0)
        matcher, walk, applies = new_matcher(grammar), [], []
        for _ in range(300):
            started = time.perf_counter()
            fill(matcher, bitmask)
            walk.append(time.perf_counter() - started)
            logits = torch.randn(VOCAB, generator=generator)
            started = time.perf_counter()  # as inference.grammar_mask applies it
            forbidden = np.unpackbits(bitmask.numpy().view(np.uint8), count=VOCAB, bitorder="little") == 0
            np.putmask(logits.numpy(), forbidden, -np.inf)
            applies.append(time.perf_counter() - started)
            token = int(logits.argmax())
            if token == tok.eos_token_id:
                break
            accept(matcher, token)
        walk.sort()
        rows.append({"engine": name, "json": label, "setup_ms": round(1000 * setup_s), "compile_ms":
                     round(1000 * compile_s, 1), "first_mask_us": round(1e6 * first_s),
                     "forced_mean_us": round(1e6 * statistics.mean(forced), 1),
                     "walk_mean_us": round(1e6 * statistics.mean(walk), 1),
                     "walk_p50_us": round(1e6 * walk[len(walk) // 2], 1),
                     "walk_p99_us": round(1e6 * walk[int(0.99 * (len(walk) - 1))], 1),
                     "apply_p50_us": round(1e6 * statistics.median(applies), 1)})
    return rows


def llguidance_setup(tok: Any) -> Any:
    """The product's engine, as tasks.json_grammar and inference.grammar_mask use it."""
    import llguidance

    from models_registry.inference.token_vocabulary import Vocabulary
    from models_registry.tasks.json_grammar import COMPACT

    engine = Vocabulary(tok, VOCAB, [tok.eos_token_id]).engine
    return (lambda schema: llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=COMPACT),
            lambda grammar: llguidance.LLMatcher(engine, grammar),
            lambda m, bitmask: m.unsafe_compute_mask_ptr(bitmask.data_ptr(), bitmask.numel() * 4),
            lambda m, token: m.consume_token(token))


def xgrammar_setup(tok: Any) -> Any:
    """xgrammar with compact JSON (no whitespace, "," and ":")."""
    import xgrammar

    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo.from_huggingface(tok, vocab_size=VOCAB),
                                        max_threads=1, cache_enabled=False)
    return (lambda schema: compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                                        separators=(",", ":"), strict_mode=False),
            xgrammar.GrammarMatcher,
            lambda m, bitmask: m.fill_next_token_bitmask(bitmask.view(1, -1), 0),
            lambda m, token: m.accept_token(token))


def outlines_setup(tok: Any) -> Any:
    """outlines-core: a regex of the schema (no whitespace), indexed over the vocabulary."""
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    byte_of = byte_decoder()
    tokens: dict[bytes, list[int]] = {}
    for text, token in tok.get_vocab().items():
        if token != tok.eos_token_id:
            tokens.setdefault(bytes(byte_of[c] for c in text), []).append(token)
    vocabulary = Vocabulary(tok.eos_token_id, tokens)
    return (lambda schema: Index(build_regex_from_schema(json.dumps(schema), whitespace_pattern=""), vocabulary),
            Guide,
            lambda m, bitmask: m.write_mask_into(bitmask.data_ptr(), bitmask.numel(), 4),
            lambda m, token: m.advance(token))


def main() -> None:
    """Install the peers, build the tokenizer, measure each engine, print the table."""
    import torch

    torch.set_num_threads(1)
    peers_on_path()
    tok = tokenizer()
    load = os.getloadavg()[0]
    rows = []
    for name, setup in (("llguidance", llguidance_setup), ("xgrammar", xgrammar_setup),
                        ("outlines-core", outlines_setup)):
        rows += measure(name, tok, setup)
        print(rows[-2], rows[-1], sep="\n", flush=True)
    keys = list(rows[0])
    print(f"\nload average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end; vocabulary {len(tok)}")
    print("| " + " | ".join(keys) + " |\n|" + "---|" * len(keys))
    for row in rows:
        print("| " + " | ".join(str(row[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
