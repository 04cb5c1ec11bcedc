"""Where the shared production traces live on disk."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "TD3SCHED_TRACES"


def traces_dir() -> Path:
    """The folder holding the production traces.

    ``$TD3SCHED_TRACES`` when set, else ``../shared/traces`` beside the repository root (the layout
    of a development checkout). Raises FileNotFoundError naming both places when neither exists.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        path = Path(env)
    else:
        path = Path(__file__).resolve().parents[3].parent / "shared" / "traces"
    if not path.is_dir():
        raise FileNotFoundError(
            f"trace folder {path} does not exist: set ${ENV_VAR} to the folder holding "
            "alibaba-gpu-v2025/, alibaba-gpu-v2023/, bitbrains-rnd/ ..."
        )
    return path
