"""deploy.local_ports: a port another socket holds is reported before a server is started."""

from __future__ import annotations

import socket

from deploy.local_ports import refuse_taken, taken


def test_a_listening_port_is_taken_and_a_closed_one_is_free() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert taken([port]) == [port]
        message = refuse_taken([port], "vLLM")
        assert message is not None and f"port {port} on 127.0.0.1 is already in use" in message
        assert message.startswith("cannot start vLLM")
    assert taken([port]) == []
    assert refuse_taken([port], "vLLM") is None
