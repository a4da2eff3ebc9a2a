"""Registration of the ``phy802`` backend with ``torch.distributed``: its name, its configuration
(``PHY802_REPLAY``), the creator torch calls in ``new_group(backend="phy802")``, the hint given
when a group is made without :func:`register`, and the plugins that register inner backends in a
process (:func:`load_backend_plugins`)."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import torch.distributed as dist

from integration.inner import check_inner_backends, served_devices
from integration.replay import ReplayConfig

BACKEND_NAME = "phy802"


ENV_VAR = "PHY802_REPLAY"


class UnsupportedOperation(NotImplementedError):
    """A collective the replay wrapper does not model (raised on every rank, so nothing hangs)."""


def configure(config: ReplayConfig) -> None:
    """Put ``config`` in the environment (``PHY802_REPLAY``) for groups created afterwards."""
    os.environ[ENV_VAR] = json.dumps(config.to_dict())


def _config_from_env() -> ReplayConfig:
    raw = os.environ.get(ENV_VAR)
    if not raw:
        return ReplayConfig()
    try:
        return ReplayConfig.from_dict(json.loads(raw))
    except (ValueError, TypeError) as exc:
        raise ValueError(f"environment variable {ENV_VAR}: bad replay configuration: {exc}") from exc


def _creator(store, rank: int, size: int, timeout: timedelta):
    if not _REGISTERED and ENV_VAR not in os.environ:
        raise RuntimeError(NOT_REGISTERED_HINT)
    from integration.process_group import (
        ReplayProcessGroup,  # the group needs this module first
    )

    return ReplayProcessGroup(store, rank, size, timeout, _config_from_env())


#: what a group made without :func:`register` (and without ``PHY802_REPLAY``) says
NOT_REGISTERED_HINT = (f"{BACKEND_NAME}: the replay backend was not configured: call "
                       "integration.process_group.register(ReplayConfig(...)) on every rank before "
                       f"dist.new_group(backend={BACKEND_NAME!r}) (or set {ENV_VAR} for processes started elsewhere)")


_REGISTERED: list = []  # non-empty once register() ran in this process


def register(config: ReplayConfig | None = None) -> None:
    """Register the ``phy802`` backend and optionally :func:`configure` it.

    The inner backends of the configuration are checked first (:func:`integration.inner.check_inner_backends`:
    ``ValueError`` naming the value, before any rank blocks). The backend is registered for every
    device type the configuration serves on this machine (importing this module registers it for
    ``cpu`` only, so that a group made without ``register`` gets :data:`NOT_REGISTERED_HINT` instead
    of torch's "Unknown backend type").
    """
    if config is not None:
        check_inner_backends(config.inner_backends)
        configure(config)
    devices = served_devices(_config_from_env().inner_backends)
    _REGISTERED.append(True)
    _register_devices(devices)


def _register_devices(devices: list[str]) -> None:
    if BACKEND_NAME not in dist.Backend.backend_list:
        dist.Backend.register_backend(BACKEND_NAME, _creator, devices=devices)
        return
    known = dist.Backend.backend_capability.setdefault(BACKEND_NAME, [])
    for d in devices:  # a later configuration that serves more device types (torch keeps the first list)
        if d not in known:
            known.append(d)


def load_backend_plugins(specs) -> None:
    """Import each plugin ``MODULE`` or ``MODULE:FUNCTION`` of ``specs`` (calling ``FUNCTION()``), so that
    the backends it registers with ``torch.distributed.Backend.register_backend`` can be named in
    ``ReplayConfig.inner_backends`` (a vendor backend, or a test's stand-in). Every process that makes a
    group must load them: spawned ranks and torchrun's alike (``TrainConfig.backend_plugins``, ``phy802
    train --backend-plugin``). ``ValueError`` naming the plugin when it cannot be loaded."""
    import importlib

    for spec in specs:
        if not isinstance(spec, str) or not spec or spec.count(":") > 1:
            raise ValueError(f"backend plugin {spec!r}: expected MODULE or MODULE:FUNCTION")
        mod_name, _, fn_name = spec.partition(":")
        try:
            mod = importlib.import_module(mod_name)
        except ImportError as exc:
            raise ValueError(f"backend plugin {spec!r}: cannot import {mod_name!r} ({exc}); is it on "
                             "PYTHONPATH?") from None
        if fn_name:
            fn = getattr(mod, fn_name, None)
            if not callable(fn):
                raise ValueError(f"backend plugin {spec!r}: module {mod_name!r} has no function {fn_name!r}")
            fn()


# registered for CPU at import, so that a group made before register() says what to do
# (NOT_REGISTERED_HINT) instead of torch's "Unknown backend type phy802"
_register_devices(["cpu"])
