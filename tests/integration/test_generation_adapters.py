"""LoRA adapters of a chat GPT-2 through the real stack: an adapter's name in /v1/chat/completions and on the HF
route generates what peft's merged adapter generates greedily, chats of the base and four adapters at once (streamed
and whole) each get their own answer, and a token granted one adapter neither uses nor sees the others."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from tests import adapter_layouts, model_factory
from tests.stack import Stack, http_json

pytestmark = pytest.mark.integration
pytest.importorskip("peft")

BASE = "chat"
ADAPTERS = ("alpha", "beta", "gamma", "delta")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "The cat sees the dog and"}]
TOKENS = 12


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("generation-adapters")
    base = model_factory.build_tiny_gpt2(root / "chat", positions=256, chat_template=model_factory.CHAT_TEMPLATE)
    return {BASE: base, **{name: adapter_layouts.build_adapter(base, root / name, seed=n + 1, r=2 + n,
                                                               task_type="CAUSAL_LM",
                                                               targets=adapter_layouts.GPT2_TARGETS)
                           for n, name in enumerate(ADAPTERS)}}


@pytest.fixture(scope="module")
def stack(dirs: dict[str, Path]) -> Iterator[Stack]:
    with Stack.started() as running:
        running.manage("register_model", BASE, "--source", str(dirs[BASE]), "--task", "text-generation",
                       "--max-batch-size", "8", "--timeout", "60")
        for name in ADAPTERS:
            running.manage("register_adapter", name, "--base", BASE, "--source", str(dirs[name]))
        running.create_token("all")
        running.create_token("only-alpha", models="alpha")
        running.start_worker()
        running.start_web()
        running.wait_ready([BASE, *ADAPTERS])
        yield running


@pytest.fixture(scope="module")
def reference(dirs: dict[str, Path]) -> dict[str, str]:
    """Each model's greedy answer to MESSAGES in process: the base, and peft's merged adapters."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(dirs[BASE]))
    ids = tokenizer(tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True),
                    return_tensors="pt")
    answers = {}
    for name in (BASE, *ADAPTERS):
        model = adapter_layouts.merged_model(dirs[BASE], dirs[name], "CAUSAL_LM") if name != BASE \
            else adapter_layouts.base_model(dirs[BASE], "CAUSAL_LM")
        out = model.generate(**ids, max_new_tokens=TOKENS, do_sample=False, pad_token_id=model.config.eos_token_id)
        answers[name] = tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True)
    assert len(set(answers.values())) == len(answers)  # every adapter changes the answer, each differently
    return answers


def client(stack: Stack, token: str = "all") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack.url}/v1", api_key=stack.tokens[token], max_retries=0, timeout=60)


def chat(stack: Stack, name: str, stream: bool = False) -> str:
    if not stream:
        answer = client(stack).chat.completions.create(model=name, messages=MESSAGES, max_tokens=TOKENS,
                                                       temperature=0)
        assert answer.model == name
        return answer.choices[0].message.content or ""
    chunks = client(stack).chat.completions.create(model=name, messages=MESSAGES, max_tokens=TOKENS, temperature=0,
                                                   stream=True)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_an_adapters_name_chats_as_its_merged_model(stack: Stack, reference: dict[str, str]) -> None:
    assert chat(stack, "beta") == reference["beta"]
    assert chat(stack, "gamma", stream=True) == reference["gamma"]
    prompt = "system: Be brief.\nuser: The cat sees the dog and\nassistant:"
    status, _, body = http_json("POST", f"{stack.url}/models/delta",
                                {"inputs": prompt, "parameters": {"max_new_tokens": TOKENS, "do_sample": False}},
                                token=stack.tokens["all"])
    assert status == 200, body
    assert body[0]["generated_text"] == prompt + reference["delta"]


def test_chats_of_the_base_and_four_adapters_at_once_each_get_their_own_answer(stack: Stack,
                                                                              reference: dict[str, str]) -> None:
    asks = [(name, stream) for name in (BASE, *ADAPTERS) for stream in (False, True)]
    with ThreadPoolExecutor(len(asks)) as pool:
        answers = list(pool.map(lambda ask: chat(stack, *ask), asks))
    for (name, stream), answer in zip(asks, answers):
        assert answer == reference[name], (name, stream)


def test_a_token_granted_one_adapter_neither_chats_with_nor_sees_the_others(stack: Stack,
                                                                           reference: dict[str, str]) -> None:
    only = client(stack, "only-alpha")
    answer = only.chat.completions.create(model="alpha", messages=MESSAGES, max_tokens=TOKENS, temperature=0)
    assert answer.choices[0].message.content == reference["alpha"]
    for name in ("beta", BASE):
        with pytest.raises(openai.PermissionDeniedError):
            only.chat.completions.create(model=name, messages=MESSAGES, max_tokens=TOKENS)
    assert [m.id for m in only.models.list().data] == ["alpha"]
