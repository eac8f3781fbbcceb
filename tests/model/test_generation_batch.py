"""The decode batch: rows joining, leaving and yielding their places give the answers generate() gives alone."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests import model_factory

torch = pytest.importorskip("torch")
from models_registry.inference import decode_scheduler, fast_lane, generation_batch, generation_check, kv_slots
from models_registry.inference.generation_batch import GenerationBatch, Row
from models_registry.inference.loading import load_pipeline

PROMPTS = ["The cat sees", "A dog likes the lazy dog and", "Paris", "Once upon a time the blue sky"]


HEAD = "You are a helpful assistant who answers in short sentences about cats, dogs and the weather. "


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = model_factory.build_tiny_gpt2(tmp_path_factory.mktemp("decode") / "gpt2", positions=256)
    return load_pipeline("text-generation", str(path), None, "cpu", torch.float32)


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = model_factory.build_tiny_qwen2(tmp_path_factory.mktemp("decode") / "qwen2", positions=256)
    return load_pipeline("text-generation", str(path), None, "cpu", torch.float32)


@pytest.fixture
def computed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The tokens each forward computes (its first layer's queries)."""
    counts: list[int] = []

    def counting(module: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if module.layer_idx == 0:
            counts.append(query.shape[2])
        return kv_slots.attend(module, query, *args, **kwargs)

    monkeypatch.setitem(kv_slots.AttentionInterface._global_mapping, kv_slots.ATTENTION, counting)
    return counts


def alone(pipe: Any, prompt: str, tokens: int) -> list[int]:
    """generate()'s greedy tokens for one prompt."""
    ids = pipe.tokenizer(prompt, return_tensors="pt")
    out = pipe.model.generate(**ids, max_new_tokens=tokens, do_sample=False, min_new_tokens=tokens)
    return out[0, ids["input_ids"].shape[1]:].tolist()


def run(batch: GenerationBatch, rows: list[Row], plan: dict[int, tuple[list[Row], list[Row]]] | None = None,
        limit: int = 400) -> list[Row]:
    """Steps until every row finished; plan: at step n, (rows joining, rows yielding) besides the first join.

    A row that yields its slot waits again in the scheduler's queue and joins at a later step by itself.
    """
    plan = plan or {}
    finished: list[Row] = []
    joining = list(rows)
    for n in range(limit):
        more, yielding = plan.get(n, ([], []))
        finished += batch.step(joining + more, yielding)
        joining = []
        if len(finished) == len(rows) + sum(len(j) for j, _ in plan.values()):
            return finished
    raise AssertionError("the rows did not finish")


def row(batch: GenerationBatch, prompt: str, tokens: int, name: str = "", **params: Any) -> Row:
    return batch.prepare(name or prompt, prompt, {"max_new_tokens": tokens, **params}, None)


def test_rows_of_different_lengths_decode_as_each_would_alone(gpt2: Any) -> None:
    batch = GenerationBatch(gpt2)
    rows = [row(batch, p, 6 + 3 * n) for n, p in enumerate(PROMPTS)]
    run(batch, rows)
    for r, p in zip(rows, PROMPTS):
        assert r.sequence.ids == alone(gpt2, p, len(r.sequence.ids)), p
    assert batch.rows == []


def test_a_row_joining_later_and_one_yielding_its_place_still_give_the_same_tokens(gpt2: Any) -> None:
    batch = GenerationBatch(gpt2)
    first = [row(batch, PROMPTS[0], 20), row(batch, PROMPTS[1], 20)]
    late = row(batch, PROMPTS[2], 12)
    plan = {3: ([late], [first[1]]), 6: ([], [first[0]])}
    run(batch, first, plan)
    for r, p in ((first[0], PROMPTS[0]), (first[1], PROMPTS[1]), (late, PROMPTS[2])):
        assert r.sequence.ids == alone(gpt2, p, len(r.sequence.ids)), p
    assert [len(r.sequence.ids) for r in first] == [20, 20]


def test_a_seeded_row_samples_the_same_whatever_runs_beside_it(gpt2: Any) -> None:
    solo = GenerationBatch(gpt2)
    mine = row(solo, PROMPTS[0], 10, do_sample=True, seed=7, temperature=1.3)
    run(solo, [mine])
    crowded = GenerationBatch(gpt2)
    again = row(crowded, PROMPTS[0], 10, do_sample=True, seed=7, temperature=1.3)
    others = [row(crowded, p, 15, do_sample=True, seed=n) for n, p in enumerate(PROMPTS)]
    run(crowded, [again, *others], {2: ([], [again])})
    assert again.sequence.ids == mine.sequence.ids


@pytest.mark.parametrize("model", ["gpt2", "qwen2"])
def test_a_long_prompt_prefilled_in_chunks_beside_decoding_rows_gives_the_same_tokens(
        model: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, computed: list[int]) -> None:
    pipe = request.getfixturevalue(model)
    monkeypatch.setattr(decode_scheduler, "FIRST_CHUNK", 7)
    monkeypatch.setattr(decode_scheduler, "MIN_CHUNK", 7)
    monkeypatch.setattr(decode_scheduler, "STEP_S", 0.0)
    batch = GenerationBatch(pipe)
    long_prompt = HEAD * 2
    short = row(batch, PROMPTS[0], 30)
    long = row(batch, long_prompt, 8)
    assert len(long.ids) > 40
    run(batch, [short], {2: ([long], [])})
    for r, p in ((short, PROMPTS[0]), (long, long_prompt)):
        assert r.sequence.ids == alone(pipe, p, len(r.sequence.ids)), p
    assert max(computed) <= 1 + 7  # a decoding row's token and one chunk of the long prompt per step


def test_a_shared_prompt_head_is_computed_once(gpt2: Any, computed: list[int]) -> None:
    batch = GenerationBatch(gpt2)
    keeper = row(batch, PROMPTS[1], 60, name="keeper")  # the batch is never idle: the first's slot stays
    first = row(batch, HEAD + "The cat sees", 6, name="first")
    batch.step([keeper, first])
    while not first.done:
        batch.step()
    computed.clear()
    later = [row(batch, HEAD + p, 6, name=p) for p in ("A dog", "Paris is")]
    run(batch, later)
    for r in later:
        assert r.sequence.ids == alone(gpt2, r.prompt, len(r.sequence.ids)), r.prompt
    head = len(row(batch, HEAD, 1).ids)
    assert head > 30 and max(computed) < 12, computed  # their tails and the decode steps: never the head


@pytest.mark.parametrize("chunk", [32, 64])
def test_the_choices_of_one_prompt_share_its_prefill(gpt2: Any, monkeypatch: pytest.MonkeyPatch,
                                                     computed: list[int], chunk: int) -> None:
    monkeypatch.setattr(decode_scheduler, "WAIT_FOR_HEAD", 16)
    monkeypatch.setattr(decode_scheduler, "FIRST_CHUNK", chunk)  # a slow step's budget (32) leaves a 16-token tail
    monkeypatch.setattr(decode_scheduler, "MIN_CHUNK", chunk)
    monkeypatch.setattr(decode_scheduler, "STEP_S", 0.0)
    batch = GenerationBatch(gpt2)
    prompt = HEAD * 2
    choices = [row(batch, prompt, 5, name=f"choice-{n}", do_sample=True, seed=n) for n in range(4)]
    run(batch, choices)
    prompt_tokens = len(choices[0].ids)
    assert sum(computed) < prompt_tokens + 4 * 2 + 4 * 5, computed  # one prefill, a token each to draw from
    alone_batch = GenerationBatch(gpt2)
    again = row(alone_batch, prompt, 5, do_sample=True, seed=3)
    run(alone_batch, [again])
    assert again.sequence.ids == choices[3].sequence.ids  # forked, it samples as it would alone


def test_a_preempted_row_resumes_from_its_kept_slot(gpt2: Any, computed: list[int]) -> None:
    batch = GenerationBatch(gpt2)
    mine = row(batch, HEAD, 30)
    run(batch, [mine], {0: ([row(batch, PROMPTS[1], 40)], []), 5: ([], [mine])})
    assert mine.sequence.ids == alone(gpt2, HEAD, 30)
    assert computed[0] > len(mine.ids) and max(computed[1:]) < 4  # its prompt was not computed a second time


def forgetful(module: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
    """An attention that writes the slot cache but attends each token to itself alone (bypasses it)."""
    kv_slots.attend(module, query, key, value, *args, **kwargs)
    return value.repeat_interleave(query.shape[1] // value.shape[1], dim=1).transpose(1, 2), None


def test_verify_admits_these_models_and_refuses_one_whose_attention_does_not_go_through_it(
        gpt2: Any, qwen2: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert generation_check.verify(gpt2) and generation_check.verify(qwen2)
    try:
        monkeypatch.setitem(kv_slots.AttentionInterface._global_mapping, kv_slots.ATTENTION, forgetful)
        assert not generation_check.verify(gpt2) and not generation_check.supports(gpt2.model)
    finally:
        monkeypatch.undo()
    assert generation_check.verify(gpt2) and generation_check.supports(gpt2.model)


def test_packed_linear_layers_give_the_models_own_tokens(tmp_path: Any) -> None:
    from models_registry.inference import cpu_packing

    path = model_factory.build_tiny_gpt2(tmp_path / "gpt2", positions=256)
    packed = load_pipeline("text-generation", str(path), None, "cpu", torch.float32)
    plain = load_pipeline("text-generation", str(path), None, "cpu", torch.float32)
    if not cpu_packing.available(packed.model):
        pytest.skip("no oneDNN packed linear on this machine")
    assert cpu_packing.pack(packed.model) == 2 * 4 + 1  # c_attn, c_proj, c_fc, mlp c_proj per layer; the LM head
    assert packed.model.transformer.h[0].mlp.c_fc.weight.numel() == 0  # its dense copy is freed
    assert packed.model.lm_head.weight.numel() > 0  # tied to the embedding: kept
    batch = GenerationBatch(packed)
    rows = [row(batch, p, 12) for p in PROMPTS]
    run(batch, rows)
    for r, p in zip(rows, PROMPTS):
        assert r.sequence.ids == alone(plain, p, len(r.sequence.ids)), p
    assert generation_check.verify(packed)


def test_packed_bfloat16_layers_give_the_bfloat16_models_logits(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from models_registry.inference import cpu_packing

    path = model_factory.build_tiny_gpt2(tmp_path / "gpt2", positions=256)
    packed = load_pipeline("text-generation", str(path), None, "cpu", torch.bfloat16)
    plain = load_pipeline("text-generation", str(path), None, "cpu", torch.bfloat16)
    if not cpu_packing.available(packed.model):
        pytest.skip("no oneDNN bfloat16 on this CPU (AVX512-BF16 or AMX)")
    assert cpu_packing.pack(packed.model) == 2 * 4 + 1
    assert packed.model.transformer.h[0].mlp.c_fc.weight.numel() == 0
    ids = packed.tokenizer(PROMPTS[1], return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        got, want = packed.model(ids).logits.float(), plain.model(ids).logits.float()
    assert got.dtype == torch.float32 and (got - want).abs().max() <= 2e-2 * max(1.0, float(want.abs().max()))
    batch = GenerationBatch(packed)  # the slot cache in bfloat16, as the model
    rows = [row(batch, p, 6) for p in PROMPTS]
    run(batch, rows)
    assert all(len(r.sequence.ids) == 6 for r in rows) and batch.cache.dtype == torch.bfloat16
    assert generation_check.verify(packed)  # within half precision's rounding of its own logits
    try:
        monkeypatch.setitem(kv_slots.AttentionInterface._global_mapping, kv_slots.ATTENTION, forgetful)
        assert not generation_check.verify(packed)  # but not a bypassed cache
    finally:
        monkeypatch.undo()


def test_a_long_prompt_alone_is_prefilled_over_steps_that_draw_no_token(gpt2: Any, monkeypatch: pytest.MonkeyPatch,
                                                                          computed: list[int]) -> None:
    monkeypatch.setattr(decode_scheduler, "FIRST_CHUNK", 10)
    monkeypatch.setattr(decode_scheduler, "MIN_CHUNK", 10)
    monkeypatch.setattr(decode_scheduler, "STEP_S", 0.0)
    batch = GenerationBatch(gpt2)
    alone_row = row(batch, HEAD, 5)
    run(batch, [alone_row])
    assert computed[:3] == [10, 10, 10] and alone_row.sequence.ids == alone(gpt2, HEAD, 5)


def test_the_slot_cache_is_allocated_once_for_every_row_as_rows_join_grow_and_leave(gpt2: Any) -> None:
    batch = GenerationBatch(gpt2, max_rows=8)
    keeper = row(batch, PROMPTS[0], 80, name="keeper")  # the batch is never idle until it ends
    batch.step([keeper])
    storage = batch.cache.keys[0].untyped_storage().data_ptr()
    assert batch.cache.capacity == (8, batch.limit)
    joining = [row(batch, p * (n + 1), 4 + 10 * n, name=f"r{n}") for n, p in enumerate(PROMPTS)]
    for r in joining:  # longer and longer rows take more slots, others leave meanwhile
        batch.step([r])
        batch.step()
        assert batch.cache.keys[0].untyped_storage().data_ptr() == storage
    while batch.rows:
        batch.step()
    assert batch.cache.allocations == 1
    for r in [keeper, *joining]:
        assert r.sequence.ids == alone(gpt2, r.prompt, len(r.sequence.ids)), r.prompt


def test_the_slot_cache_keeps_what_rows_wrote_and_reads_zeros_where_none_did() -> None:
    cache = kv_slots.SlotCache(2, 2, 4, torch.float32, "cpu", 256, 4)
    cache.reserve(1, 10)
    cache.keys[1][0, :, :10] = 1.5
    pointer = cache.keys[1].data_ptr()
    cache.reserve(3, 200)
    assert cache.keys[1].data_ptr() == pointer and cache.allocations == 1 and (cache.slots, cache.length) == (3, 200)
    assert bool((cache.keys[1][0, :, :10] == 1.5).all())
    assert float(cache.values[0][:4].abs().sum()) == 0 and float(cache.keys[1][:, :, 10:].abs().sum()) == 0
    cache.reserve(3, 300)  # past the model's length (a model of no limit): it grows, what was written moves over
    assert cache.allocations == 2 and cache.capacity[1] >= 300 and bool((cache.keys[1][0, :, :10] == 1.5).all())


def test_short_prompts_joining_together_all_draw_their_first_token_at_the_next_step(
        gpt2: Any, monkeypatch: pytest.MonkeyPatch, computed: list[int]) -> None:
    monkeypatch.setattr(decode_scheduler, "FIRST_CHUNK", 16)
    monkeypatch.setattr(decode_scheduler, "MIN_CHUNK", 16)
    monkeypatch.setattr(decode_scheduler, "STEP_S", 0.0)
    batch = GenerationBatch(gpt2)
    long_row = row(batch, HEAD * 2, 3, name="long")
    batch.step([long_row])
    shorts = [row(batch, p, 5, name=p) for p in PROMPTS]
    assert sum(len(r.ids) for r in shorts) > 16 and all(len(r.ids) <= 16 for r in shorts)
    batch.step(shorts)
    assert all(r.sequence.ids for r in shorts)  # one step: every short prompt whole, beside the long one's chunk
    assert computed[-1] == 16 + sum(len(r.ids) for r in shorts)
    while batch.rows:
        batch.step()
    for r in [long_row, *shorts]:
        assert r.sequence.ids == alone(gpt2, r.prompt, len(r.sequence.ids)), r.prompt


def test_a_short_request_beside_long_rows_decodes_in_a_fast_lane(gpt2: Any, computed: list[int],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_lane, "SLOWDOWN", 0.0)  # riding the batch would always make it late
    batch = GenerationBatch(gpt2)
    longs = [row(batch, p, 40, name=f"long-{n}") for n, p in enumerate(PROMPTS)]
    batch.step(longs)
    batch.step()
    short = row(batch, "Paris is", 4, name="short")
    computed.clear()
    batch.step([short])
    assert short.done and len(short.sequence.ids) == 4  # its first token, and three more in forwards of its own
    assert computed == [len(longs) + len(short.ids), 1, 1, 1]  # the batch's step with its prompt, then the lane
    while batch.rows:
        batch.step()
    for r in [short, *longs]:
        assert r.sequence.ids == alone(gpt2, r.prompt, len(r.sequence.ids)), r.prompt



def test_an_idle_batch_keeps_its_heads_a_while_then_gives_its_memory_back(gpt2: Any, computed: list[int]) -> None:
    batch = GenerationBatch(gpt2)
    run(batch, [row(batch, HEAD + "The cat sees", 4, name="first")])
    assert not batch.rows and batch.cache.keys and batch.idle_since is not None  # idle, its cache kept
    computed.clear()
    later = row(batch, HEAD + "A dog", 4, name="later")  # the next request of a closed-loop client
    run(batch, [later])
    assert later.sequence.ids == alone(gpt2, later.prompt, 4)
    assert max(computed) < 12, computed  # its tail and its decode steps: the head came from the idle batch's slot
    idle = batch.idle_since
    assert batch.release_idle(idle + 1) == idle + generation_batch.KEEP_IDLE_S and batch.cache.keys
    assert batch.release_idle(idle + generation_batch.KEEP_IDLE_S) is None and not batch.cache.keys
    computed.clear()
    run(batch, [row(batch, HEAD + "Paris is", 4, name="cold")])
    assert computed[0] > 30  # released: the head is computed again


def test_a_short_request_that_riding_the_batch_keeps_in_time_rides_it(gpt2: Any, computed: list[int],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fast_lane, "SLOWDOWN", 1e9)  # never late
    batch = GenerationBatch(gpt2)
    longs = [row(batch, p, 40, name=f"long-{n}") for n, p in enumerate(PROMPTS)]
    batch.step(longs)
    batch.step()
    batch.scheduler.lane_times.append(0.01)  # measured just now: not tried again to measure it
    batch.scheduler.lane_at = time.time()
    short = row(batch, "Paris is", 4, name="short")
    computed.clear()
    while not short.done:
        batch.step([short] if not computed else [])
    assert computed == [len(longs) + len(short.ids)] + [len(longs) + 1] * 3  # four steps of the batch, no lane
    while batch.rows:
        batch.step()
    for r in [short, *longs]:
        assert r.sequence.ids == alone(gpt2, r.prompt, len(r.sequence.ids)), r.prompt


def test_a_lane_forward_measured_long_ago_is_measured_again(gpt2: Any, computed: list[int]) -> None:
    batch = GenerationBatch(gpt2)
    longs = [row(batch, p, 40, name=f"long-{n}") for n, p in enumerate(PROMPTS)]
    batch.step(longs)
    batch.step()
    batch.scheduler.lane_times.append(1e6)  # slow, and stale
    batch.scheduler.lane_at = time.time() - 2 * fast_lane.FRESH_S
    short = row(batch, "Paris is", 4, name="short")
    computed.clear()
    batch.step([short])
    assert computed[:2] == [len(longs) + len(short.ids), 1]  # the lane ran again, to be measured
    assert min(batch.scheduler.lane_times) < 1e6


def test_a_short_request_counts_its_time_from_its_arrival(gpt2: Any, computed: list[int]) -> None:
    batch = GenerationBatch(gpt2)
    longs = [row(batch, p, 40, name=f"long-{n}") for n, p in enumerate(PROMPTS)]
    batch.step(longs)
    batch.step()
    batch.scheduler.lane_times.append(0.01)
    batch.scheduler.lane_at = time.time()
    batch.scheduler.step_s = 0.001  # riding costs nothing: only the time it waited before it was read makes it late
    short = batch.prepare("short", "Paris is", {"max_new_tokens": 4}, None, waited_s=1.0)
    computed.clear()
    batch.step([short])
    assert computed == [len(short.ids), 1, 1, 1]  # it waited 1 s, over twice four 10 ms lane forwards: lane first


def test_a_short_request_late_even_riding_one_forward_goes_through_the_lane_before_the_batch(
        gpt2: Any, computed: list[int]) -> None:
    batch = GenerationBatch(gpt2)
    longs = [row(batch, p, 40, name=f"long-{n}") for n, p in enumerate(PROMPTS)]
    batch.step(longs)
    batch.step()
    batch.scheduler.lane_times.append(0.01)  # a lane forward alone: 10 ms, measured just now
    batch.scheduler.lane_at = time.time()
    batch.scheduler.step_s = 1.0  # a batch forward: 1 s, more than twice the four lane forwards its answer needs
    short = row(batch, "Paris is", 4, name="short")
    drawn = [len(r.sequence.ids) for r in longs]
    computed.clear()
    finished = batch.step([short])
    assert finished == [short] and len(short.sequence.ids) == 4  # answered at this step
    assert computed == [len(short.ids), 1, 1, 1]  # its prompt and three tokens, alone: no batch forward
    assert [len(r.sequence.ids) for r in longs] == drawn  # the long rows move at the next step
    while batch.rows:
        batch.step()
    for r in [short, *longs]:
        assert r.sequence.ids == alone(gpt2, r.prompt, len(r.sequence.ids)), r.prompt


def test_short_requests_joining_at_every_step_never_hold_the_long_rows_two_steps_in_a_row(
        gpt2: Any, computed: list[int]) -> None:
    batch = GenerationBatch(gpt2)
    longs = [row(batch, p, 40, name=f"long-{n}") for n, p in enumerate(PROMPTS + PROMPTS)]
    batch.step(longs)
    batch.step()
    drawn = [len(r.sequence.ids) for r in longs]
    for n in range(4):  # a late short request joins at each of four steps
        batch.scheduler.lane_times.append(0.01)
        batch.scheduler.lane_at, batch.scheduler.step_s = time.time(), 1.0
        batch.step([row(batch, "Paris is", 4, name=f"short-{n}")])
    assert [len(r.sequence.ids) for r in longs] == [d + 2 for d in drawn]  # every other step was the batch's
