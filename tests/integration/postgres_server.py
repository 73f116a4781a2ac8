"""A throwaway real PostgreSQL server on 127.0.0.1 for route-store tests (Debian's ``postgresql``).

``initdb`` into a temp directory, ``postgres`` on a free port with its socket in that
directory, stopped with ``pg_ctl stop`` and the directory removed at the end. PostgreSQL
refuses to run as root, so as root the server runs as the ``postgres`` user (which the
Debian package creates). :func:`why_unavailable` says what to install when it cannot run.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def why_unavailable() -> str | None:
    if _bin_dir() is None:
        return "no PostgreSQL server binaries (apt-get install postgresql)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "no PostgreSQL driver (pip install 'turnout[postgres]')"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no 'postgres' user to run the server as"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def postgres_server(timeout: float = 30.0) -> Iterator[str]:
    """Yield a SQLAlchemy URL (``postgresql+psycopg://``) of a fresh database on a new server."""
    bin_dir = _bin_dir()
    assert bin_dir is not None, why_unavailable()
    root = Path(tempfile.mkdtemp(prefix="turnout-pg-"))
    data = root / "data"
    as_user: list[str] = []
    user = pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        entry = pwd.getpwnam("postgres")
        os.chown(root, entry.pw_uid, entry.pw_gid)
        as_user, user = ["runuser", "-u", "postgres", "--"], "postgres"

    def run(*cmd: str) -> None:
        subprocess.run([*as_user, *cmd], check=True, capture_output=True, timeout=timeout)

    port = _free_port()
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", user, "--no-sync")
        options = f"-h 127.0.0.1 -p {port} -k {root} -F"
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start")
        try:
            run(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", user, "turnout")
            yield f"postgresql+psycopg://{user}@127.0.0.1:{port}/turnout"
        finally:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)
