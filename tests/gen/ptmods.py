"""Modules pickled whole by make_pt_fixtures.py. torch.save(model) records
classes by import path, so they live in an importable module; the C reader
never imports them, it only needs their names."""
import torch
import torch.nn as nn


class ConvBN(nn.Module):
    def __init__(self, c1, c2, k=1):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(c1, c2, k, bias=False), nn.BatchNorm2d(c2), nn.SiLU())

    def forward(self, x):
        return self.conv(x)


class MoE(nn.Module):
    def __init__(self, c, n):
        super().__init__()
        self.router = nn.Linear(c, n)
        self.experts = nn.ModuleList(ConvBN(c, c) for _ in range(n))
        self.act = None  # a None child: the walk must skip it
        self.register_buffer("scale", torch.arange(n, dtype=torch.float32))
        # not in state_dict: the walk must leave it out
        self.register_buffer("scratch", torch.ones(2), persistent=False)
        self.note = "plain attribute"


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(ConvBN(3, 4, 3), MoE(4, 3), nn.Conv2d(4, 2, 1))
        self.register_parameter("unused", None)


class Node:
    """A plain object shaped like a module, for hostile trees the reader
    must refuse (torch.nn.Module forbids cycles; pickle does not)."""


class Tagged(torch.Tensor):
    """A tensor subclass: torch.save writes it through _rebuild_from_type_v2."""
