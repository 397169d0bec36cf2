"""Starts a real kvmesh agent for the tests: $KVMESH_BIN, else one built
with `go build` from this checkout."""

import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the kvmesh package

import kvmesh  # noqa: E402

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
_built = None


def binary():
    global _built
    if os.environ.get("KVMESH_BIN"):
        return os.environ["KVMESH_BIN"]
    if _built is None:
        out = tempfile.mkdtemp(prefix="kvmesh-bin")
        subprocess.run(["go", "build", "-o", os.path.join(out, "kvmesh"), "./cmd/kvmesh"], cwd=REPO, check=True)
        _built = os.path.join(out, "kvmesh")
    return _built


class Agent:
    """An agent process on sockets in a fresh directory."""

    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="kvmesh-py")
        self.socket = os.path.join(self.dir, "agent.sock")
        self.mempool_socket = os.path.join(self.dir, "mempool.sock")
        self.log = open(os.path.join(self.dir, "agent.log"), "w+")
        self.proc = subprocess.Popen(
            [binary(), "agent", "--data-dir", os.path.join(self.dir, "data"), "--socket", self.socket,
             "--admin-addr", "", "--mem-capacity", "256MiB", "--disk-capacity", "0"] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        # A fresh channel per try: one that failed early backs off for
        # seconds before it dials again.
        deadline = time.time() + 20
        while True:
            c = kvmesh.Client(self.socket)
            try:
                if os.path.exists(self.mempool_socket):
                    c.rpc.Stat(kvmesh.client.pb.StatRequest(), timeout=1)
                    break
            except Exception:
                pass
            finally:
                c.close()
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("agent did not start:\n" + self.logs())
            time.sleep(0.02)

    def logs(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
