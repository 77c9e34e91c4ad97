"""PyLO's meta-models, copied for the export tests (PyLO is not a dependency of `elo`).

Copied from github.com/Belilovsky-Lab/pylo at commit
d05c6c1e4f4d7c46a91828a0826c2699bfe48211 (2026-06-22):

- `MetaMLP` from `pylo/models/Meta_MLP.py` (the small_fc meta-model of `ELO_naive`);
- `CELO2MLP` and `CELO2_FEATURE_DIMS` from `pylo/models/CELO2_MLP.py` (the meta-model of
  `ELO_CELO2_naive`).

The module structure, parameter names, shapes, initialisation and forward passes are PyLO's,
statement for statement; only docstrings are shortened and the formatting follows ruff.
Importing this file needs `torch` and `huggingface_hub`.
"""

from collections import OrderedDict

import torch
import torch.nn as nn
from huggingface_hub import PyTorchModelHubMixin


class MetaMLP(
    torch.nn.Module,
    PyTorchModelHubMixin,
    license="apache-2.0",
    tags=["learned-optimizer"],
):
    """`pylo/models/Meta_MLP.py`: input -> ReLU -> `hidden_layers` x (linear -> ReLU) -> output."""

    def __init__(self, input_size, hidden_size, hidden_layers):
        super().__init__()
        self.network = torch.nn.Sequential(
            OrderedDict(
                [
                    ("input", torch.nn.Linear(input_size, hidden_size)),
                    ("relu_input", torch.nn.ReLU()),
                ]
            )
        )
        for _ in range(hidden_layers):
            self.network.add_module(f"linear_{_}", torch.nn.Linear(hidden_size, hidden_size))
            self.network.add_module(f"relu_{_}", torch.nn.ReLU())
        self.network.add_module("output", torch.nn.Linear(hidden_size, 2))

    def forward(self, x):
        return self.network(x)


# g, clip(g), p, m[3], rms[1], m*rsqrt[3], rsqrt[1], fac_g[3], g*rsqrt[1],
# row_feat[3], col_feat[3], rsqrt(row)[3], rsqrt(col)[3], fac_mom_mult[3]
CELO2_FEATURE_DIMS = (1, 1, 1, 3, 1, 3, 1, 3, 1, 3, 3, 3, 3, 3)


class CELO2MLP(
    nn.Module,
    PyTorchModelHubMixin,
    license="apache-2.0",
    tags=["learned-optimizer"],
):
    """`pylo/models/CELO2_MLP.py`: a split first layer (one `(feature_dim, hidden_size)` weight
    per input group, summed), then dense layers; weights are `(in, out)` and applied `x @ w`."""

    def __init__(
        self,
        feature_dims=CELO2_FEATURE_DIMS,
        hidden_size=8,
        hidden_layers=2,
        output_size=3,
        activation="relu",
    ):
        super().__init__()
        self.feature_dims = tuple(feature_dims)
        self.hidden_size = hidden_size
        self.hidden_layers = hidden_layers
        self.output_size = output_size
        self.activation = activation

        if activation == "relu":
            self.act_fn = torch.relu
        elif activation == "tanh":
            self.act_fn = torch.tanh
        else:
            raise ValueError(f"Invalid MLP activation: {activation}")

        self.w0 = nn.ParameterList(
            [nn.Parameter(torch.empty(fd, hidden_size)) for fd in self.feature_dims]
        )
        self.b0 = nn.Parameter(torch.zeros(hidden_size))

        layer_sizes = [hidden_size] * hidden_layers + [output_size]
        self.dense_w = nn.ParameterList()
        self.dense_b = nn.ParameterList()
        last = hidden_size
        for size in layer_sizes[1:]:
            self.dense_w.append(nn.Parameter(torch.empty(last, size)))
            self.dense_b.append(nn.Parameter(torch.zeros(size)))
            last = size

        self.reset_parameters()

    def reset_parameters(self):
        total_in = sum(self.feature_dims)
        for w in self.w0:
            nn.init.trunc_normal_(w, std=1.0 / (total_in**0.5))
        last = self.hidden_size
        for w in self.dense_w:
            nn.init.trunc_normal_(w, std=1.0 / (last**0.5))
            last = w.shape[-1]

    def forward(self, inps):
        """`inps`: per-group tensors `[..., feature_dim]`, already normalised; fewer than
        `feature_dims` (9 groups for a 1-D parameter) use only the leading split weights."""
        o = inps[0] @ self.w0[0]
        for x, w in zip(inps[1:], self.w0[1:]):
            o = o + x @ w
        o = o + self.b0
        o = self.act_fn(o)

        n = len(self.dense_w)
        for i, (w, b) in enumerate(zip(self.dense_w, self.dense_b)):
            o = o @ w + b
            if i != n - 1:
                o = self.act_fn(o)
        return o
