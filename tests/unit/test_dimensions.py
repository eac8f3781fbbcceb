"""Matryoshka dimensions: which size is asked for, which are allowed, and the cut vectors."""

from __future__ import annotations

import numpy as np
import pytest

from models_registry.api.hf import dimensions
from models_registry.core.batch_types import BatchPolicy
from models_registry.core.errors import InvalidInput
from models_registry.catalog.specs import TaskSpec
from models_registry.tasks.task_inputs import validate_parameters

FE = "feature-extraction"


def task(**parameters: object) -> TaskSpec:
    return TaskSpec(name="t", task=FE, parameters=dict(parameters), pooling="mean", normalize=True,
                    policy=BatchPolicy(), timeout_s=30)


def test_either_name_asks_for_a_size() -> None:
    assert dimensions.requested({"dimensions": 64}) == 64
    assert dimensions.requested({"truncate_dim": 64, "dimensions": None}) == 64
    assert dimensions.requested({"truncate_dim": 64, "dimensions": 64}) == 64
    assert dimensions.requested({}) is None
    with pytest.raises(InvalidInput, match="disagree"):
        dimensions.requested({"truncate_dim": 64, "dimensions": 32})


def test_the_worker_never_sees_the_sizes() -> None:
    assert dimensions.without_keys({"dimensions": 2, "truncate_dim": 2, "matryoshka_dimensions": [2],
                                    "normalize": True}) == {"normalize": True}


def test_token_vectors_are_cut_on_their_last_axis() -> None:
    tokens = np.arange(12, dtype="<f4").reshape(3, 4)
    [(data, shape)] = dimensions.shorten([[tokens.tobytes(), [3, 4]]], 2, task(), ("m", "t", 0), normalize=False)
    assert shape == [3, 2] and np.array_equal(np.frombuffer(data, "<f4").reshape(3, 2), tokens[:, :2])


def test_a_zero_prefix_stays_zero_when_renormalized() -> None:
    [(data, _)] = dimensions.shorten([[np.array([0, 0, 1], "<f4").tobytes(), [3]]], 2, task(), ("m", "t", 1), True)
    assert np.array_equal(np.frombuffer(data, "<f4"), [0, 0])


def test_the_native_size_is_always_allowed_and_learnt() -> None:
    sized = task(matryoshka_dimensions=[2])
    outputs = [[np.ones(4, "<f4").tobytes(), [4]]]
    assert dimensions.shorten(outputs, 4, sized, ("m", "t", 2), True) is outputs
    assert dimensions.known_native(("m", "t", 2)) == 4
    with pytest.raises(InvalidInput, match="sizes this task serves: 2"):
        dimensions.check(3, sized, 4)


@pytest.mark.parametrize("sizes", [[], [0], [2, 2], "64", [True], [70_000]])
def test_declared_sizes_are_checked_at_registration(sizes: object) -> None:
    with pytest.raises(InvalidInput, match="distinct sizes"):
        validate_parameters(FE, {"matryoshka_dimensions": sizes})


def test_declared_sizes_are_not_a_request_parameter() -> None:
    assert validate_parameters(FE, {"matryoshka_dimensions": [256, 64]}) == {"matryoshka_dimensions": [256, 64]}
    with pytest.raises(InvalidInput, match="registration"):
        validate_parameters(FE, {"matryoshka_dimensions": [64]}, from_request=True)
