"""``turnout serve --ray``: run the gateway as a Ray Serve application on a local Ray cluster.

Off the request path: it starts Ray (``ray.init`` on this machine, no dashboard), Ray Serve's
HTTP proxy on ``--host``/``--port``, and the application of ``serving.ray_app`` with
``--replicas`` gateway replicas; then waits for Ctrl-C or SIGTERM and shuts Serve and Ray
down, leaving no Ray process behind. On a multi-node cluster deploy the rendered config
instead (``turnout deploy render --target ray``, or KubeRay's RayService with ``--target k8s``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from deploy.local_ports import refuse_taken
from serving.errors import ConfigError

INSTALL_HINT = "pip install 'turnout[ray]'"
SHUTDOWN_S = 20.0
DRAIN_S = 10.0  # requests in flight at SIGTERM get this long to finish
READY_WAIT_S = 150.0  # past a gateway replica's own wait for its engines (ray_app.WARM_TIMEOUT_S)


def _wait_until_ready(host: str, port: int, stop: threading.Event) -> bool:
    """Until the gateway's ``/ready`` answers 200 through Serve's proxy (or ``stop``, or the wait's end)."""
    import httpx

    probe_host = "127.0.0.1" if host in ("", "0.0.0.0") else ("::1" if host == "::" else host)
    url = f"http://[{probe_host}]:{port}/ready" if ":" in probe_host else f"http://{probe_host}:{port}/ready"
    deadline = time.monotonic() + READY_WAIT_S
    while time.monotonic() < deadline and not stop.is_set():
        try:  # trust_env=False: an HTTP(S)_PROXY set for the world must not carry a local probe
            if httpx.get(url, timeout=2.0, trust_env=False).status_code == 200:
                return True
        except (httpx.HTTPError, httpx.InvalidURL):
            pass
        stop.wait(0.2)
    return stop.is_set()


def _drain_gateway_replicas(ray_serve: Any, replicas: int) -> None:
    """Ask every gateway replica to drain and wait, at most ``DRAIN_S``, until each refuses new
    requests and has nothing in flight (what is left after ``ray_drain.CANCEL_AFTER_S`` the
    replicas end themselves). A counter that cannot be reached: delete the application anyway."""
    from serving.ray_app import COUNTER

    try:
        counter = ray_serve.get_deployment_handle(COUNTER, app_name="turnout")
        counter.drain.remote().result(timeout_s=5)
        deadline = time.monotonic() + DRAIN_S
        while time.monotonic() < deadline:
            heard, in_flight = counter.drained.remote().result(timeout_s=5)
            if heard >= replicas and in_flight == 0:
                return
            time.sleep(0.25)
    except Exception as exc:  # the counter gone or stuck: Serve's own drain is what is left
        print(f"turnout: gateway replicas not drained ({type(exc).__name__}: {exc})", file=sys.stderr)


def serve(args: argparse.Namespace) -> int:
    try:
        import ray
        from ray import serve as ray_serve
    except ImportError:
        print(f"turnout: --ray needs Ray Serve: {INSTALL_HINT}", file=sys.stderr)
        return 2
    from serving.config import default_config, parse_config, read_config_file
    from serving.ray_app import build_from_config

    replicas = 1 if args.replicas is None else args.replicas
    if replicas < 1:
        print("turnout: --replicas must be at least 1", file=sys.stderr)
        return 2
    base_dir: str | None = None
    try:
        if args.config:
            # Every gateway replica gets the mapping read here, not the path: one that restarts
            # later must not re-read a file edited since (the replicas would disagree), and the
            # store URL is resolved here, once, as for the default config.
            path = Path(args.config).resolve()
            data = read_config_file(path)
            config = parse_config(data, str(path), base_dir=path.parent)
            source: Any = {**data, "store": {**(data.get("store") or {}), "url": config.store.url}}
            base_dir = str(path.parent)  # relative specs: paths resolve against the file's folder
        else:
            config = default_config()
            source = config.model_dump(mode="json")  # the store URL resolved here, once
    except ConfigError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 2
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    busy = refuse_taken((port,), "the Ray Serve gateway", host=host)
    if busy is not None:  # else Serve's proxy fails deep in Ray with a 40-line traceback
        print(f"turnout: {busy}", file=sys.stderr)
        return 1
    from serving.store.engine import display_url

    # As `turnout serve` says it; then the ~15 s of Ray's start-up are not silent.
    print(f"turnout: route store {display_url(config.store.url)}", file=sys.stderr)
    print(f"turnout: starting a local Ray cluster and {replicas} gateway replica(s) …", file=sys.stderr)
    stop = threading.Event()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        address="local",
        num_cpus=os.cpu_count() or 2,
        include_dashboard=False,
        object_store_memory=100_000_000,
        log_to_driver=args.log_level in ("debug", "info"),
        logging_level=logging.getLevelName((args.log_level or "warning").upper()),
    )
    # Installed after ray.init, which sets handlers of its own. Until Serve runs the app, Ctrl-C
    # or SIGTERM interrupt the start; afterwards they end the wait. Either way Ray is shut down.
    running = threading.Event()

    def request_stop(*_: object) -> None:
        stop.set()
        if not running.is_set():
            raise KeyboardInterrupt

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, request_stop)
    # No access log line per request from Serve's proxy and replicas unless --log-level debug.
    logging_config = {
        "log_level": (args.log_level or "warning").upper(),
        "enable_access_log": args.log_level == "debug",
    }
    # Serve's driver-side logger says INFO whatever ray.init was told ("Started Serve…",
    # "Connecting to existing Serve app…", "Deleting app…"): only at --log-level info or debug.
    logging.getLogger("ray.serve").setLevel(logging_config["log_level"])
    try:
        ray_serve.start(http_options={"host": host, "port": port}, logging_config=logging_config)
        app = build_from_config(config, source, gateway_replicas=replicas, base_dir=base_dir)
        ray_serve.run(app, name="turnout", route_prefix="/", blocking=False, logging_config=logging_config)
        running.set()
        # serve.run returns before Serve's proxy has learned the route: for a few seconds it
        # answered every request with its own text/plain 404. Say it is up once it serves.
        if not _wait_until_ready(host, port, stop):
            print(f"turnout: /ready did not answer 200 within {READY_WAIT_S:g} s", file=sys.stderr)
        if not stop.is_set():  # not while it is shutting down
            print(f"turnout: Ray Serve gateway on http://{host}:{port} ({replicas} replica(s))", flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        print("turnout: stopped while starting", file=sys.stderr)
    finally:
        served = running.is_set()
        running.set()  # a second Ctrl-C or SIGTERM no longer interrupts the shutdown below
        deleted = False
        if served:
            # Drain first, as uvicorn does alone: the gateway replicas refuse new requests and
            # end what is still running (serving.ray_drain); deleting the application then stops
            # routing to it (Serve's graceful shutdown). Deleted at once, it cut what was in
            # flight and answered the rest with Serve's 404; ray_serve.shutdown() alone killed
            # the proxy with requests still on it.
            _drain_gateway_replicas(ray_serve, replicas)
            draining = threading.Thread(target=ray_serve.delete, args=("turnout",), daemon=True)
            draining.start()
            draining.join(DRAIN_S)
            deleted = not draining.is_alive()
        if not deleted:
            # Serve's graceful shutdown waits on its controller; cap it, then stop the whole node.
            # Once the application is deleted it has nothing left to do but kill its controller
            # under its own long polls, which printed two "(raylet) Task ServeController… failed"
            # warnings at every Ctrl-C: ray.shutdown() ends the node it started, Serve included.
            closing = threading.Thread(target=ray_serve.shutdown, daemon=True)
            closing.start()
            closing.join(SHUTDOWN_S)
        ray.shutdown()
    return 0
