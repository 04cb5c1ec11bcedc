"""The model registry: versions with their cards and gate results, one serving pointer, promotion that a
kill cannot tear, rollback.

    REGISTRY/
      versions/<version>/      model.pt, model.json (the card), model.onnx, and once gated gate.json;
                               promotion.json once promoted (which version it replaced, when)
      serving -> versions/<v>  a symbolic link: the engine's ``model:`` names REGISTRY/serving

``<version>`` is the model's short content hash (``rl.card.content_sha256``, its first 12 hex digits):
the ``model_version`` the engine puts in every answer, log record and metric.

**Registration** (``register``) copies a model folder into ``versions/.<version>.<pid>.tmp``, exports
``model.onnx`` there when torch is installed, fsyncs every file and the folder, then renames the folder
to ``versions/<version>`` and fsyncs ``versions/``: a version folder exists whole or not at all.

**Promotion** (``promote``) of a registered version: (1) ``promotion.json`` is written into the version's
folder (atomically: temporary file, fsync, rename) naming the version serving now; (2) a new link
``.serving.<pid>.tmp`` -> ``versions/<version>`` is made and renamed over ``serving`` (``rename(2)``
replaces a link atomically), and the registry folder is fsynced. Killed before (2)'s rename, the old
version serves and the registry lists the new one as registered, not serving; after it, the new one
serves. There is no moment at which ``serving`` names a partial model or nothing (tests/lifecycle:
SIGKILL at every step). The engine's hot reload (``engine.serve``) sees the files behind ``serving``
change and swaps the model in.

**Rollback** (``rollback``) points ``serving`` at the version the serving one replaced (its
``promotion.json``), by the same atomic link rename: rolling back twice goes two promotions back.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from td3sched.rl.card import CARD_FILE, MODEL_FILE, ONNX_FILE, ModelError, folder_content_sha256

REGISTRY_ENV = "TD3SCHED_REGISTRY"
DEFAULT_REGISTRY = "registry"
VERSIONS = "versions"
SERVING = "serving"
GATE_FILE = "gate.json"
PROMOTION_FILE = "promotion.json"
VERSION_LENGTH = 12


class RegistryError(ValueError):
    """A registry operation that cannot be done, naming the registry, the version and what was expected."""


def default_registry() -> Path:
    """``$TD3SCHED_REGISTRY``, else ``registry`` in the working directory."""
    return Path(os.environ.get(REGISTRY_ENV) or DEFAULT_REGISTRY)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json_atomic(path: Path, value: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(json.dumps(value, indent=2) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass
class Version:
    version: str
    folder: Path
    card: dict
    gate: dict | None
    promotion: dict | None
    serving: bool


class Registry:
    def __init__(self, root=None):
        self.root = Path(root) if root is not None else default_registry()
        self.versions_dir = self.root / VERSIONS
        self.serving_link = self.root / SERVING

    # --- reading ---------------------------------------------------------------------------------
    def serving(self) -> str | None:
        """The version ``serving`` points at, or None when nothing was promoted yet."""
        try:
            target = os.readlink(self.serving_link)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RegistryError(f"registry {self.root}: {SERVING} is not a link to a version ({exc})") from None
        return Path(target).name

    def folder(self, version: str) -> Path:
        """The folder of a registered version (``RegistryError`` naming the known ones otherwise)."""
        folder = self.versions_dir / version
        if not version or version.startswith(".") or not (folder / CARD_FILE).is_file():
            known = ", ".join(v.version for v in self.list()) or "none"
            raise RegistryError(f"registry {self.root}: no version {version!r}: expected one of {known}")
        return folder

    def list(self) -> list[Version]:
        """Every registered version, oldest first (by its card's creation time, then name)."""
        if not self.versions_dir.is_dir():
            return []
        serving = self.serving()
        out = []
        for folder in self.versions_dir.iterdir():
            if folder.name.startswith(".") or not folder.is_dir():
                continue  # a registration that was interrupted: never listed, never served
            card = json.loads((folder / CARD_FILE).read_text(encoding="utf-8"))
            out.append(Version(folder.name, folder, card, _read_json(folder / GATE_FILE),
                               _read_json(folder / PROMOTION_FILE), folder.name == serving))
        return sorted(out, key=lambda v: (str(v.card.get("created") or ""), v.version))

    # --- writing ---------------------------------------------------------------------------------
    def register(self, model_folder) -> str:
        """Copy a model folder into the registry (see the module's docstring); its version. A model
        already registered is not copied again."""
        model_folder = Path(model_folder)
        try:
            card, content = folder_content_sha256(model_folder)
        except ModelError as exc:
            raise RegistryError(f"cannot register {model_folder}: {exc}") from None
        version = content[:VERSION_LENGTH]
        final = self.versions_dir / version
        if (final / CARD_FILE).is_file():
            return version
        self.versions_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.versions_dir / f".{version}.{os.getpid()}.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir()
        for name in (MODEL_FILE, CARD_FILE, ONNX_FILE):
            if (model_folder / name).is_file():
                shutil.copyfile(model_folder / name, tmp / name)
        if not (tmp / ONNX_FILE).is_file():
            _export_onnx(tmp)
        for name in os.listdir(tmp):
            with open(tmp / name, "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(tmp)
        os.rename(tmp, final)
        _fsync_dir(self.versions_dir)
        return version

    def record_gate(self, version: str, gate: dict) -> None:
        _write_json_atomic(self.folder(version) / GATE_FILE, gate)

    def _point(self, version: str) -> None:
        """Point ``serving`` at ``versions/<version>`` by renaming a new link over it."""
        tmp = self.root / f".{SERVING}.{os.getpid()}.tmp"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(os.path.join(VERSIONS, version), tmp)
        os.replace(tmp, self.serving_link)
        _fsync_dir(self.root)

    def promote(self, version: str, require_gate: bool = True) -> str | None:
        """Make ``version`` the serving one; the version it replaced (None when none served). With
        ``require_gate``, a version whose gate did not pass is refused (naming the gate's reasons)."""
        folder = self.folder(version)
        gate = _read_json(folder / GATE_FILE)
        if require_gate and (gate is None or not gate.get("promote")):
            why = "it was never gated (td3sched gate)" if gate is None else "its gate refused it: " + "; ".join(
                gate.get("reasons") or ["no reason recorded"])
            raise RegistryError(f"registry {self.root}: version {version} not promoted: {why}")
        previous = self.serving()
        if previous == version:
            return previous
        _write_json_atomic(folder / PROMOTION_FILE, {"version": version, "replaced": previous, "promoted": _now()})
        self._point(version)
        return previous

    def rollback(self) -> tuple[str, str]:
        """Point ``serving`` back at the version the serving one replaced: (from, to)."""
        current = self.serving()
        if current is None:
            raise RegistryError(f"registry {self.root}: nothing is serving: nothing to roll back")
        promotion = _read_json(self.folder(current) / PROMOTION_FILE) or {}
        previous = promotion.get("replaced")
        if not previous:
            raise RegistryError(f"registry {self.root}: version {current} replaced no version: nothing to roll back to")
        self.folder(previous)
        self._point(previous)
        return current, previous


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _export_onnx(folder: Path) -> None:
    """Write ``model.onnx`` beside the state dict when torch is here (the engine then needs no torch)."""
    try:
        from td3sched.rl.model import load_model
        from td3sched.rl.onnx_export import export_bytes
    except ImportError:
        return
    data = export_bytes(load_model(folder))
    with open(folder / ONNX_FILE, "wb") as f:
        f.write(data)
