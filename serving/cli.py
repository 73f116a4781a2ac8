"""The ``turnout`` command: ``serve`` runs the gateway, ``model build`` re-creates the shipped model,
``routes`` changes a running gateway's routes and ``batches`` lists and cancels every key's Batch
API batches (admin API), ``keys`` manages API keys (store),
``plan`` and ``deploy validate`` size and check a variant spec before launch (``deploy.cli``),
``backends up triton|vllm`` installs and runs a real engine locally (``serving.cli_backends``),
``loadtest`` drives a gateway with locust (``loadtests.cli``), ``eval`` measures accuracy through the
API and ``compare`` joins load and eval runs into one report (``evals.cli``).

``turnout serve`` with no arguments serves the project's own model (fp32, int8, int4)
on 127.0.0.1:8000 with the embedded CPU engine; ``--config gateway.yaml`` declares
variants and routes. An invalid config exits with status 2 and says file, field, reason.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from serving import cli_backends, cli_batches, cli_keys, cli_routes
from serving.cli_types import LOG_LEVELS, tcp_port
from serving.errors import ConfigError


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from deploy.local_ports import refuse_taken
    from serving.app import create_app
    from serving.config import default_config, load_config
    from serving.http_protocol import ConnectionLimits, guarded_protocol
    from serving.store.engine import display_url

    try:
        config = load_config(Path(args.config)) if args.config else default_config()
    except ConfigError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 2
    # Shared, persistent state: say which (routes, keys and audit outlive the process).
    print(f"turnout: route store {display_url(config.store.url)}", file=sys.stderr)
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    busy = refuse_taken((port,), "the gateway", host=host)
    if busy is not None:  # before the models load: uvicorn would say so only after start-up
        print(f"turnout: {busy} (--port)", file=sys.stderr)
        return 1
    try:
        app = create_app(config, freeze_heap=True)
    except ConfigError as exc:
        print(f"turnout: {exc}", file=sys.stderr)
        return 2
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=args.log_level or config.server.log_level,
        access_log=args.access_log,
        loop="uvloop",
        http=guarded_protocol(
            ConnectionLimits(
                max_head_bytes=config.server.max_header_bytes,
                head_timeout_s=config.server.header_timeout_s,
                body_timeout_s=config.server.body_timeout_s,
                send_stall_timeout_s=config.server.send_stall_timeout_s,
            ),
            refusals=app.state.turnout.metrics,
        ),
        timeout_graceful_shutdown=5,
        # Nothing here reads the client address or the Server header: skip their per-request work.
        proxy_headers=False,
        server_header=False,
    )
    return 0


def _model_build(argv: list[str]) -> int:
    try:
        from deploy.model import recipe
    except ImportError as exc:
        print(
            f"turnout: the training recipe needs the [model] extra ({exc.name} is missing): "
            "pip install 'turnout[model]'",
            file=sys.stderr,
        )
        return 2
    return recipe.main(argv)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="turnout",
        description="Turnout: an OpenAI-compatible LLM gateway with A/B splits, shadows, canaries "
        "and rollbacks. 'turnout serve' with no arguments serves the project's own model (fp32, "
        "int8, int4) on 127.0.0.1:8000 with the embedded CPU engine; 'turnout serve --config "
        "gateway.yaml' serves the variants and routes it declares. 'turnout COMMAND --help' for more.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the gateway",
        description="Run the gateway. Routes, keys and the audit log live in the route store: the "
        "config's store.url, else $TURNOUT_STORE_URL, else ~/.local/state/turnout/turnout.db "
        "(shared by every gateway and CLI on this machine; printed at start).",
    )
    serve.add_argument("--config", help="gateway.yaml (default: the shipped model, all precisions)")
    serve.add_argument("--host", help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=tcp_port, help="port (default 8000)")
    serve.add_argument(
        "--log-level", choices=LOG_LEVELS, help="uvicorn log level (default from config: info)"
    )
    serve.add_argument("--access-log", action="store_true", help="log every request")
    serve.add_argument(
        "--ray", action="store_true", help="run as a Ray Serve application (needs turnout[ray])"
    )
    serve.add_argument("--replicas", type=int, default=None, help="gateway replicas under --ray (default 1)")
    model = commands.add_parser("model", help="the project's own model")
    model_commands = model.add_subparsers(dest="model_command", required=True)
    model_commands.add_parser(
        "build", help="train and export the model (needs turnout[model])", add_help=False
    )
    cli_routes.register(commands)
    cli_batches.register(commands)
    cli_keys.register(commands)
    cli_backends.register(commands)
    from deploy import cli as deploy_cli  # argparse only; the deploy modules load in run()

    deploy_cli.register(commands)
    from evals import cli as evals_cli
    from loadtests import cli as loadtests_cli

    loadtests_cli.register(commands)
    evals_cli.register(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["model", "build"]:
        return _model_build(argv[2:])
    if argv[:2] == ["loadtest", "compare"]:
        from loadtests import cli as loadtests_cli

        return loadtests_cli.compare_main(argv[2:])
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        if args.ray:
            from serving import ray_cli

            return ray_cli.serve(args)
        if args.replicas is not None:
            print("turnout: --replicas needs --ray (one uvicorn process serves without it)", file=sys.stderr)
            return 2
        return _serve(args)
    if args.command == "routes":
        return cli_routes.run(args)
    if args.command == "batches":
        return cli_batches.run(args)
    if args.command == "keys":
        return cli_keys.run(args)
    if args.command == "backends":
        return cli_backends.run(args)
    if args.command in ("plan", "deploy"):
        from deploy import cli as deploy_cli

        return deploy_cli.run(args)
    if args.command == "loadtest":
        from loadtests import cli as loadtests_cli

        return loadtests_cli.run(args)
    if args.command in ("eval", "compare"):
        from evals import cli as evals_cli

        return evals_cli.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
