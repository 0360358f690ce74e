"""A private PostgreSQL cluster a test can stop and start: the database going away for real.

The shared test database must stay up for every other test, so outage tests create their
own cluster (initdb into a temporary directory, a free port on 127.0.0.1, trust auth) with
the machine's PostgreSQL binaries, run as the `postgres` user when the tests run as root
(PostgreSQL refuses to run as root). `stop()` is a fast shutdown (connections are cut, as in
a crash or a failover); `start()` brings the same data back.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PrivateCluster:
    """initdb + pg_ctl on a temporary data directory; see the module doc."""

    def __init__(self) -> None:
        initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
        if initdb is None or pg_ctl is None:
            raise RuntimeError("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self.pg_ctl = pg_ctl
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="tf-pgcluster-"))
        self.data = self.root / "data"
        self.user = None if os.geteuid() != 0 else "postgres"
        if self.user is not None:
            pw = pwd.getpwnam(self.user)
            os.chmod(self.root, 0o755)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self._run([initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres",
                   "--no-sync", "-E", "UTF8"])
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(f"\nport = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                       f"unix_socket_directories = '{self.root}'\nfsync = off\n"
                       "max_connections = 50\n")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, argv: list[str]) -> None:
        if self.user is not None:
            argv = ["runuser", "-u", self.user, "--", *argv]
        subprocess.run(argv, check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        """Start and wait until it accepts connections (pg_ctl -w)."""
        self._run([self.pg_ctl, "-D", str(self.data), "-l", str(self.root / "log"), "-w",
                   "-t", "60", "start"])

    def stop(self) -> None:
        """Fast shutdown: every connection is cut at once."""
        self._run([self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop"])

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self._run([self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop"])
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    cluster = PrivateCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
