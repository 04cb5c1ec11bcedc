"""``td3sched export-onnx MODEL``: the actor of a model folder as an ONNX graph, its observation
normaliser inside, for ONNX Runtime (``rl.onnx_actor``). torch is needed here, at export time only.

The graph, one input and one output:

    observation  float32 [batch, 35]   raw observation (``rl.observation``), not normalised
    action       float32 [batch, A]    the actor's pre-activations (A from the card's action mode: its
                                       declared dimensions, ``rl.actions.ACTION_DIMENSIONS``)

    z      = clip((float64(observation) - mean) / std, -clip, clip)   in float64, as
             ``ObservationNormalizer.normalize`` computes it, then cast to float32
    action = LOGIT_LIMIT * tanh(MLP(z))

Parity is held against the exact actor (``exact_preactivations``: the trained weights evaluated in
float64), not against torch's float32 answer: two float32 evaluations of this 35-256-256 MLP differ
by the kernels' summation order, and ONNX Runtime 1.32 and torch 2.13 on the shipped models are
2.2e-5 and 1.5e-5 off the exact function, so 2.4e-5 and 4.8e-5 apart (1e-5 held with earlier
ONNX Runtime releases, by the luck of matching kernels). A graph exported wrong (normaliser, clip,
a layer, the output scale) is off by 1e-3 or more. A float64 graph would hold 1e-6 everywhere at
twice the inference time (~85 us against ~40 us, batch 1).

The graph's metadata names the model it was exported from (``td3sched.content_sha256``: card and
state dict, as ``rl.card.content_sha256``), its action mode and observation layout: a served graph
whose model has changed since the export is refused. Before it is written, the graph is run with
ONNX Runtime against torch on observations drawn around the normaliser's mean and on the
normaliser's clip edges; a difference above ``PARITY_TOLERANCE`` refuses the export.
"""

from __future__ import annotations

import copy
import io
import warnings
from pathlib import Path

import numpy as np
import torch

from td3sched.rl.actions import ACTION_DIMENSIONS, action_size
from td3sched.rl.card import ONNX_FILE, ModelError, write_atomic
from td3sched.rl.model import LoadedModel, load_model
from td3sched.rl.observation import OBSERVATION_FIELDS, OBSERVATION_SIZE

OPSET = 17
PARITY_TOLERANCE = 1e-4
"""Largest absolute difference of one pre-activation, ONNX Runtime against the exact actor: float32
rounding (~2e-5 measured on the shipped models) with a 4x margin."""
INPUT_NAME = "observation"
OUTPUT_NAME = "action"
METADATA_PREFIX = "td3sched."


def exact_preactivations(model: LoadedModel, obs: np.ndarray) -> np.ndarray:
    """The actor's pre-activations on raw observations ``obs``: the trained float32 weights evaluated in
    float64 on the float64 normalised observation (the parity reference)."""
    z = (np.asarray(obs, dtype=np.float64) - model.normalizer.mean) / model.normalizer.std()
    z = np.clip(z, -model.normalizer.clip, model.normalizer.clip)
    with torch.no_grad():
        return copy.deepcopy(model.actor).double()(torch.from_numpy(z)).numpy()


class NormalisedActor(torch.nn.Module):
    """observation -> normaliser (float64) -> actor: the whole served computation in one module."""

    def __init__(self, model: LoadedModel):
        super().__init__()
        self.actor = model.actor
        norm = model.normalizer
        self.register_buffer("mean", torch.tensor(norm.mean, dtype=torch.float64))
        self.register_buffer("std", torch.tensor(norm.std(), dtype=torch.float64))
        self.clip = float(norm.clip)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        z = torch.clamp((observation.double() - self.mean) / self.std, -self.clip, self.clip)
        return self.actor(z.float())


def probe_observations(model: LoadedModel, n: int = 256, seed: int = 0) -> np.ndarray:
    """Observations around the normaliser's mean (2 standard deviations) and past its clip edges."""
    rng = np.random.default_rng(seed)
    std = np.sqrt(model.normalizer.var + model.normalizer.eps)
    x = model.normalizer.mean + std * rng.normal(scale=2.0, size=(n, OBSERVATION_SIZE))
    edges = model.normalizer.mean + std * model.normalizer.clip * np.array([[1.5], [-1.5]])
    return np.vstack([x, edges]).astype(np.float32)


def export_bytes(model: LoadedModel) -> bytes:
    """The ONNX graph of ``model`` (serialised), checked against torch (``ModelError`` otherwise)."""
    import onnx

    from td3sched.rl.onnx_actor import OnnxActor

    module = NormalisedActor(model).eval()
    buf = io.BytesIO()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice: it is the one that needs no onnxscript
        torch.onnx.export(module, (torch.zeros(1, OBSERVATION_SIZE),), buf, dynamo=False, opset_version=OPSET,
                          input_names=[INPUT_NAME], output_names=[OUTPUT_NAME],
                          dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}})
    graph = onnx.load_from_string(buf.getvalue())
    for key, value in (("content_sha256", model.content_sha256), ("action_mode", model.action_mode),
                       ("action_size", str(action_size(model.action_mode))),
                       ("action_dimensions", ",".join(ACTION_DIMENSIONS[model.action_mode])),
                       ("observation_fields", ",".join(OBSERVATION_FIELDS))):
        entry = graph.metadata_props.add()
        entry.key, entry.value = METADATA_PREFIX + key, value
    graph.producer_name = "td3sched export-onnx"
    onnx.checker.check_model(graph)
    data = graph.SerializeToString()
    actor = OnnxActor.from_bytes(data, model.card, model.content_sha256, model.folder)
    obs = probe_observations(model)
    gap = float(np.abs(actor.act(obs) - exact_preactivations(model, obs)).max())
    if not gap <= PARITY_TOLERANCE:
        raise ModelError(f"{model.folder}: the ONNX graph differs from the exact actor by {gap:.2e} on probe observations: "
                         f"expected at most {PARITY_TOLERANCE:g}")
    return data


def export_onnx(folder, out: Path | None = None) -> Path:
    """Export the model in ``folder`` to ``out`` (default: ``folder/model.onnx``), atomically."""
    model = load_model(folder)
    path = Path(out) if out is not None else Path(folder) / ONNX_FILE
    write_atomic(path, export_bytes(model))
    return path
