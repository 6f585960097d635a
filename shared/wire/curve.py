"""CURVE encryption and the learner's allow-list of actor keys (ZeroMQ's CurveZMQ + ZAP).

Off by default (loopback only). With the learner's keys set, every learner socket is a CURVE server admitting only the
public keys in ``transport.curve_authorized_dir``, checked by pyzmq's ZAP handler (one per ``zmq.Context``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from shared.config import ConfigError, TransportConfig, is_loopback

ZAP_DOMAIN = "warppipe"
_lock = threading.Lock()
_authenticators: dict[int, list] = {}  # id(context) -> [context, ThreadAuthenticator, folder, users]


def _load(path: str, field: str, secret: bool) -> tuple[bytes, bytes | None]:
    try:
        public, secret_key = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"transport.{field}={path!r} is not a readable ZeroMQ certificate ({exc})") from exc
    if secret and secret_key is None:
        raise ConfigError(f"transport.{field}={path!r} holds no secret key (give the NAME.key_secret file)")
    return public, secret_key


def server_socket_options(sock: zmq.Socket, transport: TransportConfig) -> None:
    """Make a learner socket a CURVE server (call before bind); nothing when CURVE is off on loopback."""
    if not transport.curve_server_secret:
        if not is_loopback(transport.host):
            raise ConfigError(
                f"transport.curve_server_secret='' must be set to bind to transport.host={transport.host!r} (not loopback)"
            )
        return
    public, secret = _load(transport.curve_server_secret, "curve_server_secret", secret=True)
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True
    sock.setsockopt_string(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
    sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no ZAP handler running: refuse everyone, do not admit everyone


def client_socket_options(sock: zmq.Socket, transport: TransportConfig) -> None:
    """Make an actor socket a CURVE client of the learner (call before connect); nothing when CURVE is off."""
    if not transport.curve_client_secret:
        if not is_loopback(transport.host):
            raise ConfigError(
                f"transport.curve_client_secret='' must be set to connect to transport.host={transport.host!r} (not loopback)"
            )
        if transport.curve_server_secret:
            raise ConfigError(
                "transport.curve_client_secret='' must be set: the learner of this run uses CURVE "
                "and refuses actors without an allowed key"
            )
        return
    public, secret = _load(transport.curve_client_secret, "curve_client_secret", secret=True)
    server_public, _ = _load(transport.curve_server_public, "curve_server_public", secret=False)
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_serverkey = server_public


def start_authenticator(transport: TransportConfig, context: zmq.Context | None = None) -> Callable[[], None]:
    """Run the ZAP allow-list on ``context`` (shared by its users; a no-op without CURVE) before binding server sockets;
    returns the function that releases it (the handler stops with its last user)."""
    if not transport.curve_server_secret:
        return lambda: None
    ctx = context or zmq.Context.instance()
    folder = transport.curve_authorized_dir
    with _lock:
        entry = _authenticators.get(id(ctx))
        if entry is None:
            auth = ThreadAuthenticator(ctx)
            auth.start()
            auth.configure_curve(domain=ZAP_DOMAIN, location=folder)
            entry = _authenticators[id(ctx)] = [ctx, auth, folder, 0]
        elif entry[2] != folder:
            raise ConfigError(
                f"transport.curve_authorized_dir={folder!r} differs from {entry[2]!r}, "
                "whose allow-list already guards this zmq.Context"
            )
        entry[3] += 1
    released: list[bool] = []  # [True] once release() ran: it runs once

    def release() -> None:
        with _lock:
            if released:
                return
            released.append(True)
            entry[3] -= 1
            if entry[3] == 0:
                _authenticators.pop(id(ctx), None)
                entry[1].stop()

    return release


def key_wait() -> float:
    """Seconds the entry points wait for missing key files: ``WARPPIPE_KEY_WAIT`` (default 0)."""
    raw = os.environ.get("WARPPIPE_KEY_WAIT", "0")
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise ConfigError(f"WARPPIPE_KEY_WAIT={raw!r} must be a number of seconds") from None


def wait_for_key_files(transport: TransportConfig, timeout: float, should_stop: Callable[[], bool] = lambda: False) -> None:
    """Wait up to ``timeout`` s for the CURVE files ``transport`` names (made by a one-shot keys container), saying so
    once; ``should_stop`` (a stop signal) ends the wait early."""
    deadline = time.monotonic() + timeout
    paths = [p for p in (transport.curve_server_secret, transport.curve_client_secret, transport.curve_server_public) if p]

    def ready() -> bool:
        folder = transport.curve_authorized_dir
        return all(os.path.isfile(p) for p in paths) and (
            not folder or (os.path.isdir(folder) and any(f.endswith(".key") for f in os.listdir(folder)))
        )

    if not ready() and timeout > 0:
        print(f"[KEYS] waiting up to {timeout:g}s for the key files {', '.join(paths)}", flush=True)
    while not ready() and time.monotonic() < deadline and not should_stop():
        time.sleep(0.5)
