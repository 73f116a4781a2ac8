"""An unset temperature: the model's default, except that top_p or top_k alone asks to sample.

One rule for every engine that runs the model itself (the embedded engine and the shipped Triton
models), so an A/B or a shadow of one model across them does not differ on it."""

from __future__ import annotations

from backends.base import SamplingParams


def test_an_unset_temperature_is_the_models_default() -> None:
    assert SamplingParams().with_default_temperature(0.0).temperature == 0.0
    assert SamplingParams().with_default_temperature(0.7).temperature == 0.7


def test_top_p_or_top_k_alone_samples_at_temperature_1_over_a_greedy_default() -> None:
    assert SamplingParams(top_p=0.9).with_default_temperature(0.0).temperature == 1.0
    assert SamplingParams(top_k=40).with_default_temperature(0.0).temperature == 1.0
    assert SamplingParams(top_k=40).with_default_temperature(0.7).temperature == 0.7  # sampling default kept


def test_a_temperature_given_is_kept() -> None:
    params = SamplingParams(temperature=0.0, top_p=0.9)
    assert params.with_default_temperature(0.7) is params and params.greedy
