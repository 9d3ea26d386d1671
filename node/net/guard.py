"""What one incoming connection may make this node hold: the bytes it sent that the node has
not read yet.

ZeroMQ bounds a connection's queue in messages (RCVHWM) and each frame in size (MAXMSGSIZE),
but not the number of frames in one message: a peer holding a key can send messages of many
frames just under the cap, which ZeroMQ assembles whole before anything can read them. The
guard compares each accepted connection's kernel byte counter (tcpi_bytes_received) with
what the node has read from it (whenever the process grew by SCAN_GROWTH, and every
SCAN_SECONDS while bytes arrive) and shuts down a connection whose unread bytes
exceed its budget
(``cut_connections``); ZeroMQ then drops the message it was assembling. It also
counts failed incoming handshakes (``failed_handshakes``), as they happen, not only when the
node next reads. The thread looks at the process's memory every IDLE_MS, and every CHECK_MS
while bytes arrive (edge-triggered epoll on the accepted sockets): with a
hundred nodes on a machine, a guard looking every 10 ms whatever happened cost more CPU than
the machine had (each wake-up costs about 100 us here).
"""

from __future__ import annotations

import logging
import math
import os
import select
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import zmq
from zmq.utils.monitor import recv_monitor_message

from node.net.sleeper import SleepingThread

log = logging.getLogger(__name__)

CHECK_MS = 10  # while bytes arrive, how often the process's memory is looked at
IDLE_MS = 250  # and while nothing seems to arrive
SCAN_GROWTH = 16 << 20  # growth since the last scan that makes the guard scan at once
SCAN_SECONDS = 1.0  # and the longest it goes without a scan while bytes arrive
PAGE = os.sysconf("SC_PAGE_SIZE")
SLACK_MESSAGES = 4  # the queue bound is checked lazily by ZeroMQ; a message being assembled
SLACK_BYTES = 8 << 20  # at least: the kernel's receive buffer (tcp_rmem's default ceiling 6 MiB)
TCP_RMEM = Path("/proc/sys/net/ipv4/tcp_rmem")

TCP_INFO_SIZE = 136
TCP_INFO_LAST_DATA_RECV = 52  # byte offset of tcpi_last_data_recv (ms), u32
TCP_INFO_BYTES_RECEIVED = 128  # byte offset of tcpi_bytes_received, u64

HANDSHAKE_FAILURES = (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                      | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


def unread_budget(queued_messages: int, max_message_bytes: int,
                  kernel_buffer: int | None = None) -> int:
    """The unread bytes an honest connection can reach: its full queue of the largest
    messages, with slack for ZeroMQ's lazy queue bound and the kernel's receive buffer
    (this machine's tcp_rmem ceiling, if larger than SLACK_BYTES)."""
    buffer = receive_buffer_ceiling() if kernel_buffer is None else kernel_buffer
    return (queued_messages + SLACK_MESSAGES) * max_message_bytes + max(SLACK_BYTES, buffer)


def receive_buffer_ceiling() -> int:
    """The most a TCP socket's receive buffer may grow to here (0 when unknown)."""
    try:
        return int(TCP_RMEM.read_text().split()[2])
    except (OSError, ValueError, IndexError):
        return 0


def resident_bytes() -> int:
    """This process's resident memory (0 when /proc cannot be read)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def tcp_info(fd: int) -> bytes:
    """The kernel's struct tcp_info of socket `fd` (b"" when it cannot be read)."""
    try:
        with socket.socket(fileno=os.dup(fd)) as view:
            return view.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_SIZE)
    except (OSError, ValueError):
        return b""


def quiet_seconds(info: bytes) -> float:
    """How long the connection has received nothing (tcpi_last_data_recv), 0 if unknown."""
    end = TCP_INFO_LAST_DATA_RECV + 4
    return int.from_bytes(info[TCP_INFO_LAST_DATA_RECV:end], "little") / 1000 if len(
        info) >= end else 0.0


def bytes_received(info: bytes) -> int | None:
    """What the connection has received in all (tcpi_bytes_received), None if unknown."""
    end = TCP_INFO_BYTES_RECEIVED + 8
    return int.from_bytes(info[TCP_INFO_BYTES_RECEIVED:end], "little") if len(
        info) >= end else None


def _inode(fd: int) -> int | None:
    try:
        return os.fstat(fd).st_ino
    except OSError:
        return None


@dataclass
class _Connection:
    fd: int
    read: int = 0  # message bytes the node has read from it


class ConnectionGuard(SleepingThread):
    """A thread watching the accepted connections of one ROUTER socket."""

    def __init__(self, router: zmq.Socket, node_id: int, budget: int) -> None:
        self.node_id = node_id
        self.budget = budget
        self.counts = {"failed_handshakes": 0, "cut_connections": 0}
        self._monitor = router.get_monitor_socket(
            zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | HANDSHAKE_FAILURES)
        self._connections: dict[int, _Connection] = {}  # socket inode -> its connection
        self._lock = threading.Lock()
        self._arrivals = select.epoll()  # edge-triggered on every accepted connection
        super().__init__("protofed-guard", [self._monitor, self._arrivals.fileno()])

    def _release(self) -> None:  # stop() ends the thread before the ROUTER closes
        self._monitor.close(0)
        self._arrivals.close()

    def read(self, fd: int, nbytes: int) -> None:
        """The node read a message of `nbytes` from connection `fd` (any thread)."""
        inode = _inode(fd)
        with self._lock:
            connection = self._connections.get(inode) if inode is not None else None
            if connection is not None:
                connection.read += nbytes

    def _serve(self) -> None:
        scanned_at, scanned_rss, arrived = time.monotonic(), resident_bytes(), False
        while not self._stop.is_set():
            # Asleep until a monitor event, bytes on a connection, or IDLE_MS. epoll reports
            # a connection only if its bytes are still unread when the thread looks, and
            # ZeroMQ reads them at once: arrivals are a hint, the memory look every IDLE_MS
            # the guarantee.
            due = scanned_at + SCAN_SECONDS - time.monotonic() if arrived else IDLE_MS / 1000
            # at least 1 ms: a wait rounded down to 0 would spin until the scan is due
            ready = self._wait(max(1, math.ceil(min(due, IDLE_MS / 1000) * 1000)))
            while self._monitor.poll(0):
                self._event(recv_monitor_message(self._monitor, flags=zmq.NOBLOCK))
            if self._arrivals.fileno() in ready:
                self._arrivals.poll(0)  # edge-triggered: reading the events re-arms them
                arrived = True
            if not self._connections:  # nothing to scan, nothing pending
                arrived = False
                continue
            # Reading a connection's counters costs about 6 us (0.58 ms for 99): they are
            # read when the process has grown since the last reading, and every
            # SCAN_SECONDS while bytes arrive; what a connection holds shows in the
            # process's memory.
            rss, now = resident_bytes(), time.monotonic()
            if rss - scanned_rss > SCAN_GROWTH or (arrived and now - scanned_at >= SCAN_SECONDS):
                self._check()
                scanned_at, scanned_rss, arrived = now, resident_bytes(), False
            if self._arrivals.fileno() in ready:
                self._stop.wait(CHECK_MS / 1000)  # bytes are coming: look again soon

    def _event(self, message: dict) -> None:
        event, fd = message["event"], message["value"]
        if event & HANDSHAKE_FAILURES:
            self.counts["failed_handshakes"] += 1
        elif event == zmq.EVENT_ACCEPTED:
            inode = _inode(fd)
            if inode is not None:
                with self._lock:
                    self._connections[inode] = _Connection(fd)
                try:
                    self._arrivals.register(fd, select.EPOLLIN | select.EPOLLET)
                except OSError:  # closed already (or, reused, still registered): nothing new
                    pass
        elif event == zmq.EVENT_DISCONNECTED:
            self._forget(fd)

    def _forget(self, fd: int) -> None:
        try:
            self._arrivals.unregister(fd)
        except OSError:  # closing the socket removed it already
            pass
        with self._lock:
            for inode in [i for i, c in self._connections.items() if c.fd == fd]:
                del self._connections[inode]

    def _check(self) -> None:
        with self._lock:
            watched = list(self._connections.items())
        for inode, connection in watched:
            if _inode(connection.fd) != inode:  # closed, its number maybe reused
                with self._lock:
                    self._connections.pop(inode, None)
                continue
            received = bytes_received(tcp_info(connection.fd))
            if received is not None and received - connection.read > self.budget:
                self._cut(inode, connection, received - connection.read)

    def _cut(self, inode: int, connection: _Connection, unread: int) -> None:
        try:
            with socket.socket(fileno=os.dup(connection.fd)) as view:
                if os.fstat(view.fileno()).st_ino == inode:
                    view.shutdown(socket.SHUT_RDWR)  # ZeroMQ sees the end and drops it
        except OSError:
            pass
        with self._lock:
            self._connections.pop(inode, None)
        self.counts["cut_connections"] += 1
        cut = self.counts["cut_connections"]
        if cut <= 10 or cut % 100 == 0:  # rate-limited
            log.warning("node %d: closed an incoming connection holding %.1f MiB it had not "
                        "read (more than the %.1f MiB an honest neighbour's queue can hold; "
                        "%d closed so far)", self.node_id, unread / 2**20, self.budget / 2**20,
                        cut)
