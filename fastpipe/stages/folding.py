"""The evaluation's folded model (``train.eval_fold``): a torch.fx copy of the model whose Conv2d -> BatchNorm2d
chains run as one convolution with the normalisation folded in, and on CUDA with the ReLU after it (and a
residual add before it) in the same cuDNN call (``torch.cudnn_convolution_relu`` / ``_add_relu``). The copy
shares the model's modules: each evaluation folds the current weights (``fold_weights``); what an
evaluation calls, the copy checked against the model, is stages/eval_forward.py."""
from __future__ import annotations

import operator
from typing import Callable, Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import fx, nn

ADDS = (operator.add, operator.iadd, torch.add)


class FoldedConv(nn.Module):
    """conv -> BatchNorm (eval statistics) [-> + residual] [-> ReLU] as one convolution; ``fold_weights``
    folds the current weights in (``dtype``: the cuDNN call's; None: F.conv2d under the run's autocast)."""

    def __init__(self, conv: nn.Conv2d, bn: nn.BatchNorm2d, relu: bool, add: bool,
                 dtype: Optional[torch.dtype]) -> None:
        super().__init__()
        self.parts = (conv, bn)  # outside the module tree: the model owns them; the copy must not list them twice
        self.relu, self.add, self.dtype = relu, add, dtype
        self.weight: Optional[torch.Tensor] = None
        self.bias: Optional[torch.Tensor] = None

    def forward(self, x: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        conv = self.parts[0]
        args = (conv.stride, conv.padding, conv.dilation, conv.groups)
        if self.dtype is not None and self.relu:  # one cuDNN call
            x = x.to(self.dtype)
            if self.add:
                return torch.cudnn_convolution_add_relu(x, self.weight, residual.to(self.dtype), 1.0, self.bias, *args)
            return torch.cudnn_convolution_relu(x, self.weight, self.bias, *args)
        y = F.conv2d(x.to(self.dtype) if self.dtype is not None else x, self.weight, self.bias, *args)
        if self.add:
            y = y + residual
        return F.relu(y) if self.relu else y


@torch.no_grad()
def fold_weights(units: list) -> None:
    """Fold each unit's current weights in: ``conv.weight * s`` and ``bn.bias - bn.running_mean * s``
    (``+ conv.bias * s``), ``s = bn.weight / sqrt(bn.running_var + bn.eps)``, for all units at once in
    multi-tensor (foreach) calls, cast into the buffers of the last fold: for ResNet-50's 49 units on an
    H200, 1.7 ms an evaluation against 4.2-7.3 ms a unit at a time (benchmarks/results/eval-parts).
    Weights keep their memory format."""
    if not units:
        return
    convs, bns = [u.parts[0] for u in units], [u.parts[1] for u in units]
    scales = torch._foreach_add([bn.running_var for bn in bns], [float(bn.eps) for bn in bns])
    torch._foreach_rsqrt_(scales)
    _foreach_where(torch._foreach_mul_, scales, [bn.weight for bn in bns])
    biases = torch._foreach_mul([bn.running_mean for bn in bns], scales)
    torch._foreach_neg_(biases)
    _foreach_where(torch._foreach_add_, biases, [bn.bias for bn in bns])
    with_bias = [i for i, conv in enumerate(convs) if conv.bias is not None]
    if with_bias:
        torch._foreach_addcmul_([biases[i] for i in with_bias], [convs[i].bias for i in with_bias],
                                [scales[i] for i in with_bias])
    weights = torch._foreach_mul([conv.weight for conv in convs], [s.reshape(-1, 1, 1, 1) for s in scales])
    into, folded = [], []
    for unit, weight, bias in zip(units, weights, biases):
        if unit.dtype is None:
            unit.weight, unit.bias = weight, bias
        elif unit.weight is None:  # the first fold: the buffers each later fold is cast into
            unit.weight, unit.bias = weight.to(unit.dtype), bias.to(unit.dtype)
        else:
            into += [unit.weight, unit.bias]
            folded += [weight, bias]
    if into:
        torch._foreach_copy_(into, folded)


def _foreach_where(op: Callable, tensors: list, others: list) -> None:
    """``op(tensors, others)`` in place for the pairs whose other is not None (an affine-less BatchNorm)."""
    pairs = [(t, o) for t, o in zip(tensors, others) if o is not None]
    if pairs:
        op([t for t, _ in pairs], [o for _, o in pairs])


def _foldable(conv: nn.Module, bn: nn.Module) -> bool:
    return (type(conv) is nn.Conv2d and type(bn) is nn.BatchNorm2d and bn.running_var is not None
            and conv.padding_mode == "zeros" and not isinstance(conv.padding, str))


def _is_relu(node: fx.Node, modules: Dict[str, nn.Module]) -> bool:
    return ((node.op == "call_module" and type(modules.get(node.target)) is nn.ReLU)
            or (node.op == "call_function" and node.target in (F.relu, torch.relu)))


def _tail(bn_node: fx.Node, modules) -> Tuple[fx.Node, Optional[fx.Node], bool]:
    """(the last node the fused call replaces, the residual added before the ReLU or None, ReLU or not)."""
    user = next(iter(bn_node.users)) if len(bn_node.users) == 1 else None
    if user is not None and user.op == "call_function" and user.target in ADDS and not user.kwargs:
        others = [a for a in user.args if a is not bn_node]
        after = next(iter(user.users)) if len(user.users) == 1 else None
        if len(user.args) == 2 and len(others) == 1 and isinstance(others[0], fx.Node) \
                and after is not None and _is_relu(after, modules):
            return after, others[0], True
    if user is not None and _is_relu(user, modules):
        return user, None, True
    return bn_node, None, False


def fold(model: nn.Module, dtype: Optional[torch.dtype]) -> Tuple[fx.GraphModule, list]:
    """The folded copy of ``model`` (traced in eval mode, so that a forward's ``self.training`` branches
    are the evaluation's) and its FoldedConv modules. Raises what torch.fx raises on an untraceable model."""
    was_training = model.training
    model.eval()
    try:
        gm = fx.symbolic_trace(model)
    finally:
        model.train(was_training)
    modules, folded = dict(gm.named_modules()), []
    for node in list(gm.graph.nodes):
        conv_node = node.args[0] if node.op == "call_module" and node.args else None
        if not (isinstance(conv_node, fx.Node) and conv_node.op == "call_module" and len(conv_node.users) == 1
                and _foldable(modules.get(conv_node.target), modules.get(node.target))):
            continue
        last, residual, relu = _tail(node, modules)
        if dtype is not None and not relu:
            # cuDNN fuses a bias only with a ReLU; a folded conv + bias-add is no faster than conv + BatchNorm
            continue
        unit = FoldedConv(modules[conv_node.target], modules[node.target], relu, residual is not None, dtype)
        name = f"fastpipe_folded_{len(folded)}"
        gm.add_module(name, unit)
        with gm.graph.inserting_after(last):
            new = gm.graph.call_module(name, (conv_node.args[0],) + ((residual,) if residual is not None else ()))
        last.replace_all_uses_with(new)
        # the replaced chain, from its end: the ReLU, the add, the BatchNorm, the convolution
        for dead in dict.fromkeys((last, last.args[0] if residual is not None else None, node, conv_node)):
            if dead is not None and not dead.users:
                gm.graph.erase_node(dead)
        folded.append(unit)
    gm.graph.lint()
    gm.recompile()
    fold_weights(folded)  # the weights as they are now; each evaluation folds them again
    return gm, folded
