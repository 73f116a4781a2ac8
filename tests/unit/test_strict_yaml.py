"""deploy.strict_yaml: safe_load's answers, except that a key given twice is an error."""

from __future__ import annotations

import pytest
import yaml

from deploy import strict_yaml


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\nb: {x: [1, 2], y: null}\n",
        "- 1\n- {a: 1}\n- {a: 2}\n",  # equal keys in different mappings
        "base: &b {p: 1, q: 2}\nc:\n  <<: *b\n  p: 3\n",  # a merge key overridden: allowed
        "",
        "1: a\n'1': b\n",  # an int and a string are different keys
    ],
)
def test_reads_like_safe_load(text: str) -> None:
    assert strict_yaml.load(text) == yaml.safe_load(text)


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [("a: 1\na: 2\n", "'a'", 1), ("v:\n  x: {k: 1}\n  y: 2\n  x: 3\n", "'x'", 2), ("{a: 1, a: 2}", "'a'", 1)],
)
def test_a_key_given_twice_names_it_and_both_lines(text: str, key: str, line: int) -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        strict_yaml.load(text)
    assert f"found duplicate key {key} (first given on line {line})" in str(caught.value)


def test_error_marks_name_the_source_file() -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        strict_yaml.load("a: 1\na: 2\n", "/etc/turnout/gateway.yaml")
    assert 'in "/etc/turnout/gateway.yaml", line 2' in str(caught.value)
    assert "<unicode string>" not in str(caught.value)
