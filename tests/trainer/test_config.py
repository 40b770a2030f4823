"""GRPOConfig defaults against their outside references, and cross-field validation."""

from __future__ import annotations

import dataclasses

import pytest
from transformers import TrainingArguments

from trainer.config import ConfigError, GRPOConfig, load_config


def _default(cls: type, name: str) -> object:
    return {f.name: f.default for f in dataclasses.fields(cls)}[name]


def test_adam_betas_are_the_references_defaults() -> None:
    trl = pytest.importorskip("trl")  # a dev dependency: installed wherever tests run
    for reference in (TrainingArguments, trl.GRPOConfig):
        assert GRPOConfig().adam_beta1 == _default(reference, "adam_beta1")
        assert GRPOConfig().adam_beta2 == _default(reference, "adam_beta2")


def test_sequence_level_is_a_mean_over_sequences() -> None:
    assert GRPOConfig(importance_sampling_level="sequence").loss_type == "grpo"
    assert GRPOConfig(importance_sampling_level="sequence", loss_type="grpo").loss_type == "grpo"
    with pytest.raises(ConfigError, match="loss_type 'grpo'"):
        load_config(None, ["importance_sampling_level=sequence", "loss_type=dapo"])
    assert GRPOConfig().loss_type == "dapo"  # token level keeps its default


def test_top_k_is_an_option() -> None:
    assert GRPOConfig().top_k == 0 and GRPOConfig(top_k=20).top_k == 20
    with pytest.raises(ConfigError):
        load_config(None, ["top_k=-1"])


@pytest.mark.parametrize(
    ("given", "urls"),
    [
        ("http://a:8000", ["http://a:8000"]),
        (" http://a:8000 , https://b:8000/ ,", ["http://a:8000", "https://b:8000/"]),
        (["http://a:8000", " http://b:8000 "], ["http://a:8000", "http://b:8000"]),
    ],
)
def test_reward_url_is_held_as_one_list(given: str | list[str], urls: list[str]) -> None:
    assert GRPOConfig(reward_url=given).reward_url == urls
    assert GRPOConfig().reward_url == ["http://127.0.0.1:8000"]


def test_reward_url_from_yaml_is_split_once() -> None:
    config = load_config(None, ['reward_url="http://a:8000, http://b:8000"'])
    assert config.reward_url == ["http://a:8000", "http://b:8000"]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ('""', "give at least one URL"),
        ('" , "', "give at least one URL"),
        ("[]", "give at least one URL"),
        ("ftp://a:8000", "'ftp://a:8000' is not an http(s) URL"),
        ("a:8000", "'a:8000' is not an http(s) URL"),
        ("http://a:port", "'http://a:port' is not an http(s) URL"),
        ('"http://a:8000, b:8000"', "'b:8000' is not an http(s) URL"),
        ("3", "give a URL, URLs separated by commas, or a list of URLs"),
    ],
)
def test_bad_reward_url_names_the_field(given: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"^reward_url: ") as raised:
        load_config(None, [f"reward_url={given}"])
    assert message in str(raised.value)


@pytest.mark.parametrize("given", ["a:8000", '"http://a:8000,http://b:8000"', "ftp://a"])
def test_bad_tool_url_names_the_field(given: str) -> None:
    with pytest.raises(ConfigError, match=r"^tool_url: .*not an http\(s\) URL"):
        load_config(None, [f"tool_url={given}"])
    assert load_config(None, ["tool_url=http://tools:8000"]).tool_url == "http://tools:8000"


def test_the_rollout_engine_is_hf_or_vllm() -> None:
    assert load_config(None, []).rollout_engine == "hf"
    assert load_config(None, ["rollout_engine=vllm"]).rollout_engine == "vllm"
    with pytest.raises(ConfigError, match=r"^rollout_engine: "):
        load_config(None, ["rollout_engine=sglang"])
    assert load_config(None, ["rollout_engine=vllm", "code_tool=true"]).code_tool


def test_drawing_ahead_and_the_importance_weights_are_checked() -> None:
    config = load_config(None, ["rollout_engine=vllm", "max_staleness=2"])
    assert config.max_staleness == 2 and config.vllm_importance_sampling_correction
    assert config.vllm_importance_sampling_mode == "sequence_mask"
    with pytest.raises(ConfigError, match=r"max_staleness > 0 .* needs rollout_engine 'vllm'"):
        load_config(None, ["max_staleness=1"])
    with pytest.raises(ConfigError, match=r"^max_staleness: "):
        load_config(None, ["rollout_engine=vllm", "max_staleness=-1"])
    with pytest.raises(ConfigError, match=r"^vllm_importance_sampling_mode: "):
        load_config(None, ["vllm_importance_sampling_mode=token"])
    for mode in ("token_truncate", "sequence_mask"):
        with pytest.raises(ConfigError, match=r"vllm_importance_sampling_clip_max: the weights"):
            load_config(None, [f"vllm_importance_sampling_mode={mode}",
                               "vllm_importance_sampling_clip_max=null"])
    with pytest.raises(ConfigError, match=r"vllm_importance_sampling_clip_min \(2.0\) is above"):
        load_config(None, ["vllm_importance_sampling_clip_min=2", "vllm_importance_sampling_clip_max=1"])
