"""gateway.yaml validation: every error names the file, the field and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.settings import EmbeddedSettings, OpenAIHttpSettings
from serving.config import GatewayConfig, default_config, load_config
from serving.errors import ConfigError

GOOD = """
server: {port: 9000}
variants:
  local: {kind: embedded, precision: int8, batching: {max_batch_size: 8}}
  remote:
    kind: openai_http
    base_url: http://127.0.0.1:8001/v1
    model: tiny
    vendor: amd
    accelerator: mi300x
routes:
  tiny: {targets: [{variant: local}, {variant: remote, weight: 3}]}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    return path


def test_good_config_loads(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, GOOD))
    assert config.server.port == 9000
    assert isinstance(config.variants["local"], EmbeddedSettings)
    assert config.variants["local"].batching.max_batch_size == 8
    remote = config.variants["remote"]
    assert isinstance(remote, OpenAIHttpSettings) and remote.vendor == "amd"
    # the openai SDK's: a non-streamed answer sends nothing until it is whole
    assert (remote.timeouts.connect, remote.timeouts.read) == (5.0, 600.0)
    assert [t.weight for t in config.routes["tiny"].targets] == [1.0, 3.0]


def test_default_config_serves_three_precisions() -> None:
    config = default_config()
    assert list(config.routes) == ["turnout-tiny", "turnout-tiny-int8", "turnout-tiny-int4"]
    assert {v.precision for v in config.variants.values() if isinstance(v, EmbeddedSettings)} == {
        "fp32",
        "int8",
        "int4",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD.replace("precision: int8", "precision: int3"), "variants.local.precision"),
        (GOOD.replace("max_batch_size: 8", "max_batch_size: 0"), "variants.local.batching.max_batch_size"),
        (
            GOOD.replace("model: tiny", "modle: tiny"),
            "variants.remote.modle: unknown key; did you mean 'model'?",
        ),
        (
            GOOD.replace("kind: openai_http", "kind: grpc"),
            "variants.remote: kind 'grpc' is not one of: 'embedded', 'openai_http', 'triton'",
        ),
        # pydantic named its own types: "a valid dictionary or instance of BatchingSettings"
        (
            GOOD.replace("batching: {max_batch_size: 8}", "batching: 5"),
            "variants.local.batching: must be a mapping",
        ),
        (
            GOOD.replace(
                "{targets: [{variant: local}, {variant: remote, weight: 3}]}", "{targets: {variant: local}}"
            ),
            "routes.tiny.targets: must be a list",
        ),
        ("variants: {a: {kind: embedded}}\nroutes: {}\n", "routes: must not be empty"),
        (GOOD.replace("{variant: local}", "{variant: nowhere}"), "unknown variant 'nowhere'"),
        (GOOD.replace("port: 9000", "port: 70000"), "server.port"),
        (GOOD + "extra_section: 1\n", "extra_section: unknown key"),
        (GOOD.replace("max_batch_size: 8", "max_batch_sze: 8"), "did you mean 'max_batch_size'?"),
        ("routes: {}\n", "variants"),
        ("- a list\n", "expected a mapping"),
        ("variants: [\n", "not valid YAML"),
        (GOOD.replace("vendor: amd", "vendor: amd\n    vendor: nvidia"), "found duplicate key 'vendor'"),
        (
            GOOD.replace("weight: 3", "weight: .inf"),
            "routes.tiny.targets.1.weight: Input should be a finite number",
        ),
        (GOOD.replace("  tiny: {targets", "  tiny/history: {targets"), "ends in '/history'"),
        (GOOD + 'auth: {anonymous_clients: "yes"}\n', "auth.anonymous_clients: Input should be a valid bool"),
        (GOOD + "breaker: {window: 5, min_requests: 10}\n", "breaker: min_requests 10 exceeds window 5"),
        (
            # The canary's split would replace this one: "remote" would silently lose its traffic.
            GOOD.replace(
                "{variant: remote, weight: 3}]}",
                "{variant: remote, weight: 3}], canary: {stable: local, canary: remote,"
                " gates: [{metric: error_rate, max: 0.1}]}}",
            ),
            "routes.tiny.canary: a canary moves traffic from one stable variant, but the targets split it",
        ),
        (GOOD.replace("vendor: amd", "vendor: amd\n    task: chat"), "variants.remote.task: Input should be"),
        (
            GOOD.replace("vendor: amd", "vendor: amd\n    model_info: {mode: embedding}"),
            "variants.remote.model_info: unknown key; LiteLLM's model_info.mode is a variant's 'task' here",
        ),
        (
            GOOD.replace("precision: int8", "model_dir: /nonexistent/dir"),
            "variants.local.model_dir: /nonexistent/dir holds no genai_config.json",
        ),
    ],
)
def test_invalid_config_names_file_and_field(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert str(path) in message
    assert expected in message


def test_a_route_may_not_mix_an_embedding_upstream_with_a_generating_one(tmp_path: Path) -> None:
    embedding = GOOD.replace("vendor: amd", "vendor: amd\n    task: embed")
    remote = load_config(write(tmp_path, embedding)).variants["remote"]
    assert isinstance(remote, OpenAIHttpSettings) and remote.task == "embed"
    chat = "  chat: {kind: openai_http, base_url: 'http://127.0.0.1:8002/v1', model: m, task: generate}\n"
    mixed = embedding.replace("routes:", chat + "routes:").replace("{variant: local}, ", "{variant: chat}, ")
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, mixed))
    said = "routes.tiny.variants: remote (task: embed) and chat (task: generate) are on one route"
    assert said in str(caught.value)


def test_a_key_given_twice_is_refused_with_both_places(tmp_path: Path) -> None:
    """PyYAML alone keeps the last; a variant written twice would silently lose its first."""
    path = write(tmp_path, GOOD.replace("variants:\n", "variants:\n  remote: {kind: embedded}\n", 1))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "found duplicate key 'remote' (first given on line 4)" in message, message
    assert f'in "{path}", line 6' in message  # the second one


def test_a_whole_config_check_reads_without_a_placeholder_path(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD.replace("{variant: local}", "{variant: nowhere}"))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "(top level)" not in str(caught.value)
    assert "\n  routes.tiny.targets" in str(caught.value), str(caught.value)


def test_every_route_problem_is_named_at_once(tmp_path: Path) -> None:
    """A start-up names them all, not the first route's first one: one fix, one restart."""
    text = GOOD.replace("{variant: local}", "{variant: nowhere}") + (
        "  other: {targets: [{variant: local}], fallbacks: [gone], shadows: [{variant: lost}]}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    lines = str(caught.value).splitlines()[1:]
    assert lines[0].startswith("  routes.tiny.targets.0.variant: unknown variant 'nowhere'"), lines
    assert lines[1].startswith("  routes.other.shadows.0.variant: unknown variant 'lost'"), lines
    assert lines[2].startswith("  routes.other.fallbacks.0: unknown variant 'gone'"), lines
    assert len(lines) == 3, lines


def test_a_field_error_does_not_hide_the_routes_unknown_variants(tmp_path: Path) -> None:
    """pydantic runs the whole-config check only on a valid model; the routes that parsed are
    still checked, so one start-up names a bad port and a wrong variant name alike."""
    text = GOOD.replace("port: 9000", "port: 70000").replace("precision: int8", "precision: int3")
    text = text.replace("{variant: local}", "{variant: nowhere}")
    text += "  other: {targets: [{variant: remote, weight: -1}], fallbacks: [gone]}\n"
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, text))
    lines = str(caught.value).splitlines()[1:]
    assert lines == [
        "  server.port: Input should be less than or equal to 65535",
        "  variants.local.precision: Input should be 'fp32', 'int8' or 'int4'",
        "  routes.other.targets.0.weight: Input should be greater than or equal to 0",
        # "local" is known by name though its settings are wrong; "other" did not parse
        "  routes.tiny.targets.0.variant: unknown variant 'nowhere' (known: local, remote)",
    ], lines
    # a variant named by a number (YAML reads it as an int) is one name among the others
    numbered = "server: {port: 70000}\nvariants: {1: {kind: embedded}}\n"
    numbered += "routes: {r: {targets: [{variant: b}]}}\n"
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, numbered))
    assert "routes.r.targets.0.variant: unknown variant 'b' (known: 1)" in str(caught.value)


def test_a_yaml_error_points_into_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "variants: [\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert f'in "{path}", line 2' in str(caught.value) and "<unicode string>" not in str(caught.value)


def test_a_binary_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_bytes(b"variants:\n  a: \xd0\x00\xff\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(caught.value).endswith("gateway.yaml: not a text file (the byte at offset 15 is not UTF-8)")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "absent.yaml")


def test_a_bad_store_url_from_the_environment_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a SQLAlchemy traceback when the store opens: `turnout serve` exits 2 with the field."""
    monkeypatch.setenv("TURNOUT_STORE_URL", "not a url")
    with pytest.raises(ConfigError, match=r"store\.url: 'not a url' is not a database URL"):
        default_config()
    monkeypatch.setenv("TURNOUT_STORE_URL", "sqlite:////tmp/x.db")
    assert default_config().store.url == "sqlite:////tmp/x.db"


def test_an_unknown_key_that_is_one_word_of_a_known_key_is_pointed_at_it_when_only_one_has_it() -> None:
    from deploy.unknown_keys import unknown_key_message
    from serving.routing.spec import RouteSpec

    assert (
        unknown_key_message(RouteSpec, ("shadows", 0, "rate")) == "unknown key; did you mean 'sample_rate'?"
    )
    # error_rate and sample_rate both have it in a gateway config: no guess
    assert unknown_key_message(GatewayConfig, ("rate",)) == "unknown key"
