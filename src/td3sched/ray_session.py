"""A Ray instance for the project's workers (``evaluate --ray``, ``train --env-workers N --ray``): the
one convention for reaching it. No address (or ``local``) starts a local instance with the CPUs
asked for; an address (``auto``, ``host:port``, ``ray://host:port``) connects to that cluster; a Ray
already initialised in this process is reused. What ``RaySession`` started it shuts down.

Ray is an optional extra (``pip install 'td3sched[ray]'``); without it, or without a cluster at the
address, a ``RayUnavailable`` names what is missing, before any work starts.
"""

from __future__ import annotations

import logging
import socket

RAY_EXTRA = "pip install 'td3sched[ray]'"


class RayUnavailable(ValueError):
    """Ray is not installed, the address is malformed, or no cluster answers there."""


def import_ray():
    """The ``ray`` module, or a RayUnavailable naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(f"--ray needs Ray, which is not installed ({exc}): {RAY_EXTRA}") from None
    return ray


def check_ray_address(address: str | None, timeout_s: float = 5.0) -> None:
    """Fail fast (RayUnavailable) when a ``host:port`` or ``ray://host:port`` address does not answer:
    ``ray.init`` itself would wait for minutes. ``auto`` and a local instance are not checked here."""
    if address in (None, "", "local", "auto"):
        return
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rstrip("/").rpartition(":")
    if not sep or not port.isdigit():
        raise RayUnavailable(f"--ray {address!r}: expected host:port, ray://host:port, auto, or no address "
                             "(a new local instance)")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise RayUnavailable(f"--ray {address!r}: no Ray cluster answers there ({exc})") from None


class RaySession:
    """``with RaySession(address, cpus) as ray:`` the ``ray`` module, initialised: reused if this process
    already has Ray, else a new local instance of ``cpus`` CPUs (address None, "" or "local") or a
    connection to ``address``; shut down on exit if this session started it."""

    def __init__(self, address: str | None, cpus: int):
        self.address = address
        self.cpus = cpus
        self.owned = False
        self.ray = None

    def __enter__(self):
        ray = import_ray()
        self.ray = ray
        if not ray.is_initialized():
            local = self.address in (None, "", "local")
            if not local:
                check_ray_address(self.address)
            try:
                if local:
                    ray.init(num_cpus=self.cpus, include_dashboard=False, log_to_driver=False,
                             logging_level=logging.WARNING)
                else:
                    ray.init(address=self.address, log_to_driver=False, logging_level=logging.WARNING)
            except Exception as exc:  # noqa: BLE001 - Ray raises many kinds here; all mean "no cluster"
                where = "start a local Ray instance" if local else f"connect to Ray at {self.address!r}"
                raise RayUnavailable(f"--ray: could not {where}: {type(exc).__name__}: {exc}") from exc
            self.owned = True
        return ray

    def __exit__(self, *exc):
        if self.owned:
            self.ray.shutdown()
            self.owned = False
        return False
