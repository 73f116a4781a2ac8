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


def test_a_port_left_in_time_wait_by_a_stopped_server_is_free() -> None:
    """The server side closed first, so its port holds a TIME_WAIT entry: a new server binds
    it (with SO_REUSEADDR, as servers do), so the probe must not call it taken."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            accepted.close()  # the server closes first: TIME_WAIT on its port
            client.recv(1)
    assert taken([port]) == []


def test_one_port_given_to_two_listeners_is_refused_before_anything_binds() -> None:
    message = refuse_taken([8000, 8000, 8002], "tritonserver")
    assert (
        message == "cannot start tritonserver: port 8000 is given for two of its listeners; give each its own"
    )
    assert refuse_taken([0, 0], "a server") is None  # 0: any free port, each its own


def test_an_ipv6_host_is_probed_over_ipv6() -> None:
    """`turnout serve --host ::1`: an IPv4 probe cannot bind an IPv6 address and read every
    port as taken."""
    with socket.socket(socket.AF_INET6) as held:
        held.bind(("::1", 0))
        held.listen()
        port = held.getsockname()[1]
        assert taken([port], host="::1") == [port]
    assert taken([port], host="::1") == []
