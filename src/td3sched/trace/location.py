"""Where the production traces live on disk.

``$TD3SCHED_TRACES`` when set, else the user data folder ``$XDG_DATA_HOME/td3sched/traces``
(``~/.local/share/td3sched/traces`` by default). ``td3sched traces`` lists what belongs there, where
each dataset comes from, and checks every file's sha256.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "TD3SCHED_TRACES"


def default_traces_dir() -> Path:
    """The folder used when ``$TD3SCHED_TRACES`` is not set."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "td3sched" / "traces"


def traces_dir(must_exist: bool = True) -> Path:
    """The folder holding the production traces. Raises FileNotFoundError naming the folder, the
    setting and the command that explains how to fill it when it does not exist (``must_exist``)."""
    env = os.environ.get(ENV_VAR)
    path = Path(env) if env else default_traces_dir()
    if must_exist and not path.is_dir():
        where = f"${ENV_VAR}" if env else f"the default (${ENV_VAR} is not set)"
        raise FileNotFoundError(
            f"trace folder {path} ({where}) does not exist: set ${ENV_VAR} to the folder holding "
            "alibaba-gpu-v2025/, alibaba-gpu-v2023/, bitbrains-rnd/ ...; `td3sched traces` says where each "
            "comes from"
        )
    return path
