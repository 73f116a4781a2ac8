"""Command-line value types: a bad port is argparse's error, naming the value."""

from __future__ import annotations

import argparse

import pytest

from serving.cli_types import key_name, tcp_port


@pytest.mark.parametrize(("text", "port"), [("0", 0), ("8000", 8000), ("65535", 65535)])
def test_ports_in_range_are_accepted(text: str, port: int) -> None:
    assert tcp_port(text) == port


@pytest.mark.parametrize(
    ("text", "message"),
    [("65536", "port 65536 is outside 0-65535"), ("-1", "port -1 is outside 0-65535"),
     ("80x", "not a port number: '80x'"), ("", "not a port number: ''")],
)  # fmt: skip
def test_bad_ports_are_argparse_errors(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        tcp_port(text)


@pytest.mark.parametrize("name", ["ops", "team-a.bot_1", "alice@example.com", "svc:42", "x" * 64])
def test_key_names_that_read_well_are_accepted(name: str) -> None:
    assert key_name(name) == name


@pytest.mark.parametrize("name", ["", " ", "two words", "tab\there", "bell\x07", "-leading", "x" * 65, "é"])
def test_key_names_that_would_garble_tables_and_labels_are_refused(name: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="is not a key name"):
        key_name(name)
