"""Every text task end to end: real HTTP -> web -> Redis -> runworker -> the task's HF answer shape.

One module-scoped stack (one worker, one web server) serves one tiny model per task, a BART
model with its three seq2seq tasks, and MiniLM with two prompted feature-extraction tasks.
Each answer is compared with the same tiny model run here, in-process.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests import model_factory
from tests.integration.common import MiniLMReference
from tests.stack import Stack, http_json

pytestmark = [pytest.mark.integration, pytest.mark.one_phase]

NER, QA, NLI, GPT2, BART, EMBED = "tiny-ner", "tiny-qa", "tiny-nli", "tiny-gpt2", "tiny-bart", "embed"
TIMEOUT = ("--timeout", "60")
SENTENCE = "My name is Clara and I live in Berkeley."
OTHER = "The quick brown fox jumps over the lazy dog in Paris."
CONTEXT = "My name is Clara and I live in Berkeley. I work as a teacher at the city library."
LABELS = ["travel", "cooking", "dancing"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny models on disk."""
    root = tmp_path_factory.mktemp("task-models")
    return {
        NER: model_factory.build_token_classifier(root / "ner"),
        QA: model_factory.build_question_answering(root / "qa"),
        NLI: model_factory.build_zero_shot_classifier(root / "nli"),
        GPT2: model_factory.build_tiny_gpt2(root / "gpt2"),
        BART: model_factory.build_tiny_seq2seq(root / "bart"),
        EMBED: model_factory.minilm_path(),
    }


@pytest.fixture(scope="module")
def stack(paths: dict[str, Path]) -> Iterator[Stack]:
    """One worker and one web server serving a model per task."""
    with Stack.started() as running:
        register = running.manage
        register("register_model", NER, "--source", str(paths[NER]), "--task", "token-classification", *TIMEOUT)
        register("register_model", QA, "--source", str(paths[QA]), "--task", "question-answering", *TIMEOUT)
        register("register_model", NLI, "--source", str(paths[NLI]), "--task", "zero-shot-classification", *TIMEOUT)
        register("register_model", GPT2, "--source", str(paths[GPT2]), "--task", "text-generation", *TIMEOUT)
        for task in ("summarization", "translation", "text2text-generation"):  # the first is the default
            register("register_model", BART, "--source", str(paths[BART]), "--task", task, *TIMEOUT)
        register("register_model", EMBED, "--source", str(paths[EMBED]), "--task", "feature-extraction",
                 "--task-name", "query", "--parameters", '{"prompt": "query: "}', "--normalize",
                 "--max-batch-size", "4", *TIMEOUT)
        register("register_model", EMBED, "--source", str(paths[EMBED]), "--task", "feature-extraction",
                 "--task-name", "passage", "--parameters", '{"prompt": "passage: "}', "--normalize",
                 "--max-batch-size", "16", *TIMEOUT)
        running.create_token("all")
        running.start_worker()
        running.start_web()
        running.wait_ready([NER, QA, NLI, GPT2, BART, EMBED])
        yield running


@pytest.fixture(scope="module")
def post(stack: Stack) -> Any:
    """POST a JSON body to /models/<path>: (status, body)."""
    token = stack.tokens["all"]

    def send(path: str, body: Any) -> tuple[int, Any]:
        status, _, answer = http_json("POST", f"{stack.url}/models/{path}", body, token=token, timeout=60)
        return status, answer

    return send


def close(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """Same entries in the same order: equal values, scores within float noise of batching."""
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected):
        assert set(mine) == set(theirs)
        for key, value in theirs.items():
            if isinstance(value, float):
                assert mine[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
            else:
                assert mine[key] == value, key


def plain(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """numpy scalars of an in-process pipeline answer as Python values."""
    return [{k: v.item() if isinstance(v, np.generic) else v for k, v in e.items()} for e in entries]


# --- token-classification ----------------------------------------------------------------


def test_token_classification_single_and_list_inputs_match_the_pipeline(post: Any, paths: dict[str, Path]) -> None:
    from transformers import pipeline

    reference = pipeline("token-classification", model=str(paths[NER]), aggregation_strategy="simple")
    status, body = post(NER, {"inputs": SENTENCE})
    assert status == 200, body
    assert body and all(set(e) == {"entity_group", "score", "word", "start", "end"} for e in body)
    close(body, plain(reference(SENTENCE)))
    assert all(SENTENCE[e["start"]:e["end"]].lower() == e["word"] for e in body)
    status, body = post(NER, {"inputs": [OTHER, SENTENCE]})
    assert status == 200 and len(body) == 2, body
    close(body[0], plain(reference(OTHER)))
    close(body[1], plain(reference(SENTENCE)))


def test_token_classification_without_aggregation_gives_every_token(post: Any, paths: dict[str, Path]) -> None:
    from transformers import pipeline

    reference = pipeline("token-classification", model=str(paths[NER]))
    parameters = {"aggregation_strategy": "none", "ignore_labels": []}
    status, body = post(NER, {"inputs": SENTENCE, "parameters": parameters})
    assert status == 200, body
    expected = plain(reference(SENTENCE, ignore_labels=[]))
    assert len(expected) == len(reference.tokenizer(SENTENCE, add_special_tokens=False)["input_ids"])
    close(body, expected)
    assert {e["entity"] for e in body} <= {"O", "B-PER", "I-PER", "B-LOC", "I-LOC"}


# --- question-answering ------------------------------------------------------------------


def best_span(path: Path, question: str, context: str, impossible: bool = False) -> dict[str, Any]:
    """The transformers 4 QA pipeline's answer (align_to_words off), by brute force over one window."""
    import torch
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    model = AutoModelForQuestionAnswering.from_pretrained(str(path)).eval()
    encoded = tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")
    offsets = encoded.pop("offset_mapping")[0].tolist()
    with torch.inference_mode():
        out = model(**encoded)
    in_context = [s == 1 for s in encoded.sequence_ids(0)]
    scored = [i for i, inside in enumerate(in_context) if inside] + [0]  # the context and CLS
    start = torch.full_like(out.start_logits[0], float("-inf"))
    end = torch.full_like(out.end_logits[0], float("-inf"))
    start[scored], end[scored] = out.start_logits[0][scored], out.end_logits[0][scored]
    p_start, p_end = start.softmax(-1), end.softmax(-1)
    best = max(((p_start[s] * p_end[e]).item(), s, e) for s in range(len(in_context)) for e in range(s, s + 15)
               if e < len(in_context) and in_context[s] and in_context[e])
    score, s, e = best
    null = (p_start[0] * p_end[0]).item()
    if impossible and null > score:
        return {"answer": "", "score": null, "start": 0, "end": 0}
    first, last = offsets[s][0], offsets[e][1]
    return {"answer": context[first:last], "score": score, "start": first, "end": last}


def test_question_answering_single_and_list_inputs_match_the_reference(post: Any, paths: dict[str, Path]) -> None:
    pair = {"question": "Where does Clara live?", "context": CONTEXT}
    other = {"question": "What is her job?", "context": OTHER}
    status, body = post(QA, {"inputs": pair, "parameters": {"align_to_words": False}})
    assert status == 200, body
    close([body], [best_span(paths[QA], **pair)])
    status, body = post(QA, {"inputs": [pair, other], "parameters": {"align_to_words": False}})
    assert status == 200 and len(body) == 2, body
    close(body, [best_span(paths[QA], **pair), best_span(paths[QA], **other)])
    parameters = {"align_to_words": False, "handle_impossible_answer": True}
    status, body = post(QA, {"inputs": [other, pair], "parameters": parameters})
    assert status == 200, body
    close(body, [best_span(paths[QA], **other, impossible=True), best_span(paths[QA], **pair, impossible=True)])


def test_question_answering_default_answers_are_whole_words_and_top_k_is_a_list(post: Any) -> None:
    pair = {"question": "Where does Clara live?", "context": CONTEXT}
    status, body = post(QA, {"inputs": pair})
    assert status == 200 and set(body) == {"answer", "score", "start", "end"}, body
    assert body["answer"] == CONTEXT[body["start"]:body["end"]] and body["answer"]
    assert body["start"] == 0 or not CONTEXT[body["start"] - 1].isalnum()
    assert body["end"] == len(CONTEXT) or not CONTEXT[body["end"]].isalnum()
    status, ranked = post(QA, {"inputs": pair, "parameters": {"top_k": 3}})
    assert status == 200 and isinstance(ranked, list) and len(ranked) == 3, ranked
    scores = [a["score"] for a in ranked]
    assert scores == sorted(scores, reverse=True) and len({(a["start"], a["end"]) for a in ranked}) == 3
    close(ranked[:1], [body])


@pytest.mark.parametrize(
    "inputs",
    ["Where does Clara live?", {"question": "Where?"}, {"question": "Where?", "context": "Here.", "x": 1},
     [{"question": "Where?", "context": "Here."}, "Where?"], {"question": "", "context": "Here."}],
)
def test_question_answering_bad_input_shapes_are_a_400(post: Any, inputs: Any) -> None:
    status, body = post(QA, {"inputs": inputs})
    assert status == 400 and body["error_type"] == "invalid_input", body
    assert "question" in body["error"]


# --- zero-shot-classification ------------------------------------------------------------


def test_zero_shot_single_and_list_inputs_match_the_pipeline(post: Any, paths: dict[str, Path]) -> None:
    from transformers import pipeline

    reference = pipeline("zero-shot-classification", model=str(paths[NLI]))

    def expected(text: str, **kwargs: Any) -> list[dict[str, Any]]:
        raw = reference(text, candidate_labels=LABELS, **kwargs)
        return [{"label": label, "score": score} for label, score in zip(raw["labels"], raw["scores"])]

    status, body = post(NLI, {"inputs": SENTENCE, "parameters": {"candidate_labels": LABELS}})
    assert status == 200, body
    close(body, expected(SENTENCE))
    assert sum(e["score"] for e in body) == pytest.approx(1.0, abs=1e-5)
    parameters = {"candidate_labels": ",".join(LABELS), "multi_label": True, "hypothesis_template": "About {}."}
    status, body = post(NLI, {"inputs": [SENTENCE, OTHER], "parameters": parameters})
    assert status == 200 and len(body) == 2, body
    close(body[0], expected(SENTENCE, multi_label=True, hypothesis_template="About {}."))
    close(body[1], expected(OTHER, multi_label=True, hypothesis_template="About {}."))


def test_zero_shot_without_candidate_labels_is_a_400(post: Any) -> None:
    status, body = post(NLI, {"inputs": SENTENCE, "parameters": {"multi_label": True}})
    assert status == 400 and body["error_type"] == "invalid_input", body
    assert "candidate_labels" in body["error"]


# --- text-generation ---------------------------------------------------------------------


def test_text_generation_greedy_matches_the_pipeline_single_and_batched(post: Any, paths: dict[str, Path]) -> None:
    from transformers import pipeline

    reference = pipeline("text-generation", model=str(paths[GPT2]))
    prompts = ["The cat sees", "A dog likes the city of Paris and the blue sky."]  # unequal: left padding

    def expected(prompt: str, **kwargs: Any) -> list[dict[str, str]]:
        return reference(prompt, max_new_tokens=8, do_sample=False, **kwargs)

    status, body = post(GPT2, {"inputs": prompts[0], "parameters": {"max_new_tokens": 8, "do_sample": False}})
    assert status == 200, body
    assert body == expected(prompts[0]) and body[0]["generated_text"].startswith(prompts[0])
    status, body = post(GPT2, {"inputs": prompts, "parameters": {"max_new_tokens": 8}})  # greedy by default
    assert status == 200, body
    assert body == [expected(prompts[0]), expected(prompts[1])]
    status, body = post(GPT2, {"inputs": prompts[1], "parameters": {"max_new_tokens": 8, "return_full_text": False}})
    assert status == 200 and body == expected(prompts[1], return_full_text=False), body


def test_text_generation_seeded_sampling_is_repeatable(post: Any) -> None:
    request = {"inputs": "The cat sees", "parameters": {"do_sample": True, "seed": 7, "max_new_tokens": 12,
                                                        "temperature": 1.5, "top_k": 50}}
    first, second = post(GPT2, request), post(GPT2, request)
    assert first[0] == 200 and first == second, (first, second)
    greedy = post(GPT2, {"inputs": "The cat sees", "parameters": {"max_new_tokens": 12}})
    assert greedy[0] == 200 and greedy[1] != first[1], "do_sample had no effect"


@pytest.mark.parametrize(
    ("parameters", "message"),
    [({"max_new_tokens": 513}, "'max_new_tokens' must be an integer from 1 to 512"),
     ({"max_new_tokens": 200}, "exceeds the model's 128 positions"),  # checked on the worker
     ({"temperature": 0}, "'temperature' must be a number from 0.001")],
)
def test_text_generation_bounds_are_a_400(post: Any, parameters: dict[str, Any], message: str) -> None:
    status, body = post(GPT2, {"inputs": "The cat sees", "parameters": parameters})
    assert status == 400 and body["error_type"] == "invalid_input" and message in body["error"], body


# --- summarization, translation, text2text-generation ------------------------------------


@pytest.mark.parametrize(("task", "key"), [("summarization", "summary_text"), ("translation", "translation_text"),
                                          ("text2text-generation", "generated_text")])
def test_seq2seq_tasks_match_generate_single_and_batched(post: Any, paths: dict[str, Path], task: str,
                                                         key: str) -> None:
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(paths[BART]))
    model = AutoModelForSeq2SeqLM.from_pretrained(str(paths[BART])).eval()

    def expected(text: str) -> str:
        with torch.inference_mode():
            ids = model.generate(**tokenizer(text, return_tensors="pt"), max_new_tokens=8, do_sample=False)
        return tokenizer.decode(ids[0], skip_special_tokens=True)

    parameters = {"generate_parameters": {"max_new_tokens": 8}}
    status, body = post(f"{BART}/{task}", {"inputs": SENTENCE, "parameters": parameters})
    assert status == 200, body
    assert body == [{key: expected(SENTENCE)}] and body[0][key]
    status, body = post(f"{BART}/{task}", {"inputs": [OTHER, SENTENCE], "parameters": parameters})
    assert status == 200, body
    assert body == [{key: expected(OTHER)}, {key: expected(SENTENCE)}]
    assert body[0] != body[1], "outputs should depend on the input"


def test_the_seq2seq_model_default_task_is_its_first(post: Any) -> None:
    status, body = post(BART, {"inputs": SENTENCE, "parameters": {"generate_parameters": {"max_new_tokens": 4}}})
    assert status == 200 and list(body[0]) == ["summary_text"], body


def test_translation_to_a_language_the_model_lacks_is_a_400(post: Any) -> None:
    status, body = post(f"{BART}/translation", {"inputs": SENTENCE, "parameters": {"tgt_lang": "fr_XX"}})
    assert status == 400 and "knows no target language 'fr_XX'" in body["error"], body


# --- every task: parameters it does not take ---------------------------------------------


@pytest.mark.parametrize(
    ("path", "inputs", "takes"),
    [
        (NER, SENTENCE, "aggregation_strategy, ignore_labels, stride"),
        (QA, {"question": "Who?", "context": CONTEXT}, "align_to_words, doc_stride"),
        (NLI, SENTENCE, "candidate_labels, hypothesis_template, multi_label"),
        (GPT2, SENTENCE, "do_sample, max_new_tokens"),
        (f"{BART}/summarization", SENTENCE, "clean_up_tokenization_spaces, generate_parameters, truncation"),
        (f"{BART}/translation", SENTENCE, "clean_up_tokenization_spaces, generate_parameters, src_lang"),
        (f"{BART}/text2text-generation", SENTENCE, "clean_up_tokenization_spaces, generate_parameters, truncation"),
        (f"{EMBED}/query", SENTENCE, "dimensions, max_active_dims, normalize, prompt, prompt_name, prompts, truncate, "
                                    "truncate_dim, truncation_direction"),
    ],
)
def test_a_parameter_the_task_does_not_take_is_a_400_listing_the_ones_it_does(post: Any, path: str, inputs: Any,
                                                                             takes: str) -> None:
    status, body = post(path, {"inputs": inputs, "parameters": {"beam_width": 3}})
    assert status == 400 and body["error_type"] == "invalid_input", body
    assert "does not take parameter(s) beam_width; it takes: " + takes in body["error"]


# --- the Hugging Face client reads every answer ------------------------------------------


def test_huggingface_hub_inference_client_parses_each_task(stack: Stack, hub_online: None) -> None:
    from huggingface_hub import InferenceClient

    def client(path: str) -> InferenceClient:
        return InferenceClient(model=f"{stack.url}/models/{path}", token=stack.tokens["all"], timeout=60)

    entities = client(NER).token_classification(SENTENCE)
    assert entities and entities[0].entity_group and isinstance(entities[0].start, int)
    answer = client(QA).question_answering(question="Where does Clara live?", context=CONTEXT)
    assert answer.answer == CONTEXT[answer.start:answer.end]
    labels = client(NLI).zero_shot_classification(SENTENCE, candidate_labels=LABELS)
    assert sorted(x.label for x in labels) == sorted(LABELS)
    text = client(GPT2).text_generation("The cat sees", max_new_tokens=4)
    assert isinstance(text, str) and text.startswith("The cat sees")
    with pytest.warns(UserWarning, match="Ignoring following parameters: watermark"):
        # TGI-only parameters: our 400 names them the way the client expects, and it retries without.
        again = client(GPT2).text_generation("The cat sees", max_new_tokens=4, watermark=True)
    assert again == text
    summary = client(f"{BART}/summarization").summarization(SENTENCE, generate_parameters={"max_new_tokens": 4})
    assert isinstance(summary.summary_text, str) and summary.summary_text
    translated = client(f"{BART}/translation").translation(SENTENCE, generate_parameters={"max_new_tokens": 4})
    assert isinstance(translated.translation_text, str) and translated.translation_text


# --- one model, two prompted embedding tasks ---------------------------------------------


def test_query_and_passage_tasks_embed_their_own_prefixed_text(stack: Stack, post: Any) -> None:
    reference = MiniLMReference()
    texts = ["how do rivers form", "Rivers form where rain water gathers and flows downhill."]
    answers = {}
    for task in ("query", "passage"):
        status, body = post(f"{EMBED}/{task}", {"inputs": texts})
        assert status == 200, body
        got = np.array(body, dtype=np.float32)
        expected = reference([f"{task}: {t}" for t in texts])
        assert got.shape == (2, 384)
        assert (got * expected).sum(axis=1).min() > 0.9999
        answers[task] = got
    assert (answers["query"] * answers["passage"]).sum(axis=1).max() < 0.999, "the prompts made no difference"
    status, _, detail = http_json("GET", f"{stack.url}/models/{EMBED}", token=stack.tokens["all"])
    assert status == 200
    assert {t["name"]: t["max_batch_size"] for t in detail["tasks"]} == {"query": 4, "passage": 16}
