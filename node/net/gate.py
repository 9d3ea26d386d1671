"""Who may open a connection to this node: the ZAP handler of its CurveZMQ ROUTER.

Three rules, each counted in the node's record:
- only in-neighbours' keys are admitted (``refused_keys``);
- one key opens at most ``ADMISSIONS_PER_KEY`` connections per ``ADMISSION_WINDOW`` seconds
  (``refused_repeats``): a stolen key cannot multiply the memory a connection may hold;
- an address whose handshakes are refused ``BAN_AFTER`` times within ``BAN_WINDOW`` seconds
  is banned for ``BAN_SECONDS`` (``banned_addresses``): a socket filter on the listening
  socket drops its new connections in the kernel, before any CurveZMQ work is done.
  Connections already open are not affected; on one machine every node shares 127.0.0.1, so
  a ban there also delays a restarted honest neighbour until it ends.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq
import zmq.utils.z85

from node.net.sleeper import SleepingThread

log = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # where libzmq sends ZAP requests (RFC 27)
ADMISSIONS_PER_KEY = 3
ADMISSION_WINDOW = 60.0
BAN_AFTER = 50
BAN_WINDOW = 10.0
BAN_SECONDS = 30.0
POLL_MS = 50  # while an address is banned, how soon the handler notices the ban ending


@dataclass
class AdmissionPolicy:
    """The three rules as a pure state machine over (time, address, key owner)."""

    admitted_peers: frozenset[int]
    admissions_per_key: int = ADMISSIONS_PER_KEY
    admission_window: float = ADMISSION_WINDOW
    ban_after: int = BAN_AFTER
    ban_window: float = BAN_WINDOW
    ban_seconds: float = BAN_SECONDS
    counts: dict[str, int] = field(default_factory=lambda: {
        "refused_keys": 0, "refused_repeats": 0, "banned_addresses": 0})
    _admissions: dict[int, collections.deque] = field(default_factory=dict)
    _refusals: dict[str, collections.deque] = field(default_factory=dict)
    banned_until: dict[str, float] = field(default_factory=dict)

    def decide(self, now: float, address: str, peer: int | None) -> str | None:
        """None to admit, else why the connection is refused."""
        if peer is None or peer not in self.admitted_peers:
            self.counts["refused_keys"] += 1
            self._count_refusal(now, address)
            return "an unknown key" if peer is None else f"node {peer}'s key (not an in-neighbour)"
        recent = _recent(self._admissions.setdefault(peer, collections.deque()), now,
                         self.admission_window)
        if len(recent) >= self.admissions_per_key:
            self.counts["refused_repeats"] += 1
            return (f"node {peer}'s key: {len(recent)} connections in the last "
                    f"{self.admission_window:.0f} s")
        recent.append(now)
        return None

    def banned(self, now: float) -> list[str]:
        """The addresses banned at `now` (expired bans are forgotten)."""
        for address in [a for a, until in self.banned_until.items() if until <= now]:
            del self.banned_until[address]
        return sorted(self.banned_until)

    def _count_refusal(self, now: float, address: str) -> None:
        recent = _recent(self._refusals.setdefault(address, collections.deque()), now,
                         self.ban_window)
        recent.append(now)
        if len(recent) >= self.ban_after and address not in self.banned_until:
            self.banned_until[address] = now + self.ban_seconds
            self.counts["banned_addresses"] += 1
            recent.clear()


def _recent(times: collections.deque, now: float, window: float) -> collections.deque:
    while times and times[0] <= now - window:
        times.popleft()
    return times


# Classic BPF (linux/filter.h): load the IPv4 source address, compare, keep or drop.
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
SKF_NET_OFF = -0x100000
KEEP, DROP = 0xFFFFFFFF, 0
SO_ATTACH_FILTER = 26


def ban_filter(addresses: list[str]) -> list[tuple[int, int, int, int]]:
    """A socket filter (code, jt, jf, k) dropping IPv4 packets from `addresses`."""
    program = [(BPF_LD_W_ABS, 0, 0, (SKF_NET_OFF + 12) & 0xFFFFFFFF)]  # ip saddr
    for index, address in enumerate(addresses):
        value = struct.unpack("!I", socket.inet_aton(address))[0]
        program.append((BPF_JEQ_K, len(addresses) - index, 0, value))  # equal: to the drop
    return [*program, (BPF_RET_K, 0, 0, KEEP), (BPF_RET_K, 0, 0, DROP)]


def _is_ipv4(address: str) -> bool:
    try:
        socket.inet_aton(address)
    except OSError:
        return False
    return address.count(".") == 3


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Instruction))]


def attach_filter(fd: int, program: list[tuple[int, int, int, int]]) -> None:
    """Replace the socket filter of `fd` (setsockopt SO_ATTACH_FILTER; needs no privilege)."""
    instructions = (_Instruction * len(program))(*[_Instruction(*step) for step in program])
    fprog = _Program(len(program), instructions)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setsockopt(fd, socket.SOL_SOCKET, SO_ATTACH_FILTER, ctypes.byref(fprog),
                       ctypes.sizeof(fprog)) != 0:
        raise OSError(ctypes.get_errno(), "SO_ATTACH_FILTER failed")


class ZapHandler(SleepingThread):
    """A thread answering libzmq's ZAP requests under an AdmissionPolicy."""

    def __init__(self, context: zmq.Context, node_id: int, owner_of: Callable[[bytes], int | None],
                 policy: AdmissionPolicy, listener_fd: int | None) -> None:
        self.node_id = node_id
        self.owner_of = owner_of  # Z85 public key -> node id
        self.policy = policy
        self.listener_fd = listener_fd  # IPv4 listening socket to ban addresses on, if any
        self._socket = context.socket(zmq.ROUTER)
        self._socket.linger = 0
        self._socket.bind(ZAP_ENDPOINT)
        self._filtered: list[str] = []
        super().__init__("protofed-zap", [self._socket])

    def _release(self) -> None:
        self._socket.close(0)

    def _serve(self) -> None:
        while not self._stop.is_set():
            # Asleep until a request or stop(); while a ban lasts, awake every POLL_MS to
            # lift it in time.
            ready = self._wait(POLL_MS if self._filtered else None)
            if self._socket in ready:
                self._answer(self._socket.recv_multipart())
            self._apply_bans()

    def _answer(self, frames: list[bytes]) -> None:
        # [routing id, empty, version, request id, domain, address, identity, mechanism, key]
        route, request_id = frames[0], frames[3] if len(frames) > 3 else b""
        status, why = b"400", "a malformed request"
        if len(frames) >= 9 and frames[2] == b"1.0" and frames[7] == b"CURVE":
            address = frames[5].decode("ascii", "replace")
            peer = self.owner_of(zmq.utils.z85.encode(frames[8]))
            why = self.policy.decide(time.monotonic(), address, peer)
            status = b"200" if why is None else b"400"
            if why is not None:
                refused = (self.policy.counts["refused_keys"]
                           + self.policy.counts["refused_repeats"])
                if refused <= 10 or refused % 1000 == 0:  # rate-limited
                    log.warning("node %d: refused a connection from %s with %s (%d refused "
                                "so far)", self.node_id, address, why, refused)
        user = b"" if status != b"200" else zmq.utils.z85.encode(frames[8])
        self._socket.send_multipart([route, b"", b"1.0", request_id, status,
                                     b"OK" if status == b"200" else b"refused", user, b""])

    def _apply_bans(self) -> None:
        banned = [a for a in self.policy.banned(time.monotonic()) if _is_ipv4(a)]
        if banned == self._filtered or self.listener_fd is None:
            return
        try:
            attach_filter(self.listener_fd, ban_filter(banned))
        except OSError as exc:
            log.warning("node %d: cannot ban %s: %s", self.node_id, banned, exc)
            self.listener_fd = None
            return
        for address in sorted(set(banned) - set(self._filtered)):
            log.warning("node %d: banned %s for %.0f s: %d refused handshakes in %.0f s",
                        self.node_id, address, self.policy.ban_seconds, self.policy.ban_after,
                        self.policy.ban_window)
        self._filtered = banned
