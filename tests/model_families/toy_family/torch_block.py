"""The toy family's torch-native block (tests only; see the package docstring)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLPBlock(nn.Module):
    def __init__(self, config) -> None:
        super().__init__()
        self.norm = nn.RMSNorm(config.hidden_size)
        self.fc1 = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=False)
        self.fc2 = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, block_input: None) -> torch.Tensor:
        assert block_input is None  # the toy blocks need nothing besides the hidden state
        return x + self.fc2(F.relu(self.fc1(self.norm(x))))


def build_block(config, layer_number: int, *, device="cpu") -> MLPBlock:
    with torch.device(device):
        return MLPBlock(config)


def build_final_norm(config) -> nn.Module:
    return nn.RMSNorm(config.hidden_size)


def block_input(config, seq_length: int, device) -> None:
    return None
