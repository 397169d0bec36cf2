"""Host pools: memfds mapped here and, once registered on the agent's
mempool socket, in the agent too, so blocks move by (offset, length)."""

import array
import ctypes
import mmap
import os
import socket
import struct

# Opens a registration (SGLang HiCache's `rpc` wire format).
MAGIC = 0x8DF6FBFD


def socket_path(uri):
    """A socket path from 'unix:///path' or a bare path."""
    return uri[len("unix://"):] if uri.startswith("unix://") else uri


def default_mempool_socket(grpc_socket):
    """Where an agent on grpc_socket takes registrations by default."""
    return os.path.join(os.path.dirname(socket_path(grpc_socket)), "mempool.sock")


def register_fd(mempool_socket, name, fd):
    """Registers fd (a memfd) and returns (pool_id, connection). The agent
    keeps the pool while the connection stays open."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(socket_path(mempool_socket))
        nm = name.encode("utf-8")
        msg = struct.pack("<QI", MAGIC, len(nm)) + nm
        conn.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        reply = b""
        while len(reply) < 4:
            chunk = conn.recv(4 - len(reply))
            if not chunk:
                raise ConnectionError("agent refused the pool registration; see its log")
            reply += chunk
        return struct.unpack("<I", reply)[0], conn
    except BaseException:
        conn.close()
        raise


class Pool:
    """A memfd of `size` bytes, mapped, and registered with the agent.

    `addr` is the mapping's address: a pointer p with addr <= p and
    p + n <= addr + size is offset p - addr in the pool."""

    def __init__(self, mempool_socket, name, size):
        self.size = size
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        self._conn = None
        self.mem = None
        try:
            os.ftruncate(self.fd, size)
            self.mem = mmap.mmap(self.fd, size)
            self._anchor = ctypes.c_char.from_buffer(self.mem)
            self.addr = ctypes.addressof(self._anchor)
            self.id, self._conn = register_fd(mempool_socket, name, self.fd)
        except BaseException:
            self.close()
            raise

    def contains(self, ptr, n):
        return self.addr <= ptr and ptr + n <= self.addr + self.size

    def offset(self, ptr):
        return ptr - self.addr

    def close(self):
        """Unregisters and frees the pool; later requests naming it fail."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self.mem is not None:
            self._anchor = None  # the mapping cannot close while exported
            self.mem.close()
            self.mem = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class AdoptedPool:
    """A memfd the process mapped by other means (an engine's own host pool),
    found through /proc/self/maps and registered with the agent, so buffers
    in it go zero-copy too. Opening /proc/self/map_files needs
    CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE; without, adopt returns None and
    such buffers are staged."""

    def __init__(self, pool_id, conn, start, end, file_offset):
        self.id, self._conn = pool_id, conn
        self.start, self.end, self.file_offset = start, end, file_offset

    @classmethod
    def adopt(cls, mempool_socket, ptr, size):
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                lo, hi = (int(x, 16) for x in fields[0].split("-"))
                if not (lo <= ptr and ptr + size <= hi):
                    continue
                if len(fields) < 6 or not fields[5].startswith("/memfd:") or "s" not in fields[1]:
                    return None  # private or not a memfd: the agent cannot share it
                try:
                    fd = os.open("/proc/self/map_files/" + fields[0], os.O_RDWR | os.O_CLOEXEC)
                except OSError:
                    return None
                try:
                    pool_id, conn = register_fd(mempool_socket, fields[5].strip(), fd)
                except (OSError, ConnectionError):
                    return None
                finally:
                    os.close(fd)
                return cls(pool_id, conn, lo, hi, int(fields[2], 16))
        return None

    def contains(self, ptr, n):
        return self.start <= ptr and ptr + n <= self.end

    def offset(self, ptr):
        return ptr - self.start + self.file_offset

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None
