"""Where the models shipped with the package are, and where a user's own ones go.

- **Shipped** (package data, inside the installed package): ``td3sched/models/``, holding the trained
  TD3 models (``td3-dlrm``, ``td3-dlrm-seed``, ``td3-dlrm-held``, ``td3-openb``, ``td3-openb-seed``,
  ``td3-openb-held``) and the stored
  best-static search results (``best-static/``). In a checkout, ``models`` at the repository root
  links to that folder.
- **The user's**: ``$TD3SCHED_MODELS`` when set, else ``models/`` in the working directory.
  ``td3sched search-static`` writes its results under ``<that>/best-static/``; the policies
  ``best-static`` and ``best-static-seed`` read that folder first, then the shipped one.

A model is named by its folder (``td3:runs/NAME``); a name that is no folder in the working directory
(``td3:td3-dlrm``, or ``td3:models/td3-dlrm`` run outside a checkout) is looked up in the user's
models folder, then among the shipped models.
"""

from __future__ import annotations

import os
from pathlib import Path

MODELS_ENV = "TD3SCHED_MODELS"
SHIPPED_MODELS = Path(__file__).resolve().parent / "models"
BEST_STATIC = "best-static"


def user_models_dir() -> Path:
    """``$TD3SCHED_MODELS``, else ``models`` in the working directory (it need not exist)."""
    return Path(os.environ.get(MODELS_ENV) or "models")


def best_static_dirs() -> list[Path]:
    """Folders holding best-static search results, searched in this order (duplicates dropped)."""
    out: list[Path] = []
    for folder in (user_models_dir() / BEST_STATIC, SHIPPED_MODELS / BEST_STATIC):
        if folder.is_dir() and not any(folder.resolve() == f.resolve() for f in out):
            out.append(folder)
    return out


def shipped_model_names() -> list[str]:
    return sorted(p.name for p in SHIPPED_MODELS.iterdir() if p.is_dir() and p.name != BEST_STATIC) \
        if SHIPPED_MODELS.is_dir() else []


def model_folder(given) -> Path:
    """The folder ``given`` names: itself when it exists; otherwise ``NAME`` or ``models/NAME`` found in
    the user's models folder or among the shipped models; otherwise ``given`` unchanged (the caller
    reports it missing)."""
    path = Path(given)
    if path.exists():
        return path
    parts = path.parts
    if len(parts) == 2 and parts[0] == "models":
        parts = parts[1:]
    if len(parts) == 1:
        for root in (user_models_dir(), SHIPPED_MODELS):
            if (root / parts[0]).is_dir():
                return root / parts[0]
    return path
