"""The student-safe visible checks (course_lib.checks) name the usual mistakes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from course_lib.checks import (
    CheckFailed,
    check_causal_mask,
    check_close,
    check_gradients,
    check_shape,
    diagnose_attention,
    diagnose_multihead,
    diagnose_softmax,
)


def attention(q, k, v, mask=None, *, scale=None, dim=-1, after=False, nan_rows=False):
    scores = q @ k.transpose(-2, -1) * (scale or 1 / math.sqrt(q.shape[-1]))
    if mask is not None and not after:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    if mask is not None and after:
        weights = weights * mask
    elif mask is not None and not nan_rows:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v


MISTAKES = {
    "divided by D = 8 instead of sqrt(D)": lambda q, k, v, m=None: attention(
        q, k, v, m, scale=1 / 8
    ),
    "not scaled": lambda q, k, v, m=None: attention(q, k, v, m, scale=1.0),
    "softmax runs over the query axis": lambda q, k, v, m=None: attention(q, k, v, m, dim=-2),
    "applied after the softmax": lambda q, k, v, m=None: attention(q, k, v, m, after=True),
    "gives NaN for a query whose keys are all masked": lambda q, k, v, m=None: attention(
        q, k, v, m, nan_rows=True
    ),
    "attention weights": lambda q, k, v, m=None: torch.softmax(q @ k.transpose(-2, -1), -1),
    "in another order: is something transposed": lambda q, k, v, m=None: attention(
        q, k, v, m
    ).transpose(-2, -1),
    "the mask is ignored": lambda q, k, v, m=None: attention(q, k, v),
}


def test_a_correct_attention_passes(capsys):
    diagnose_attention(attention)
    assert "passes the visible checks" in capsys.readouterr().out


@pytest.mark.parametrize("needle", sorted(MISTAKES))
def test_each_mistake_is_named(needle):
    with pytest.raises(CheckFailed, match=needle.replace("(", r"\(").replace(")", r"\)")):
        diagnose_attention(MISTAKES[needle])


def test_detached_output_is_caught():
    with pytest.raises(CheckFailed, match="not differentiable"):
        diagnose_attention(lambda q, k, v, m=None: attention(q, k, v, m).detach())


def test_softmax_diagnosis():
    diagnose_softmax(lambda x: torch.softmax(x, -1))
    with pytest.raises(CheckFailed, match="wrong axis"):
        diagnose_softmax(lambda x: torch.softmax(x, -2))
    with pytest.raises(CheckFailed, match="overflows"):
        diagnose_softmax(lambda x: x.exp() / x.exp().sum(-1, keepdim=True))


def test_causal_mask_diagnosis():
    right = torch.ones(5, 5, dtype=torch.bool).tril()
    check_causal_mask(right, 5)
    for wrong, needle in (
        (~right, "inverted"),
        (right.T, "transposed"),
        (right & ~torch.eye(5, dtype=torch.bool), "diagonal"),
        (right.float(), "boolean"),
        (right[:4], "shape"),
    ):
        with pytest.raises(CheckFailed, match=needle):
            check_causal_mask(wrong, 5)


class MultiHead(nn.Module):
    def __init__(self, embed_dim, num_heads, *, scale_by_embed=False):
        super().__init__()
        self.h, self.scale_by_embed = num_heads, scale_by_embed
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (
            nn.Linear(embed_dim, embed_dim) for _ in range(4)
        )

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q, k, v = (p(x).view(B, T, self.h, C // self.h).transpose(1, 2) for p in
                   (self.q_proj, self.k_proj, self.v_proj))  # fmt: skip
        scale = 1 / math.sqrt(C if self.scale_by_embed else C // self.h)
        y = attention(q, k, v, mask, scale=scale)
        return self.out_proj(y.transpose(1, 2).reshape(B, T, C))


def test_multihead_against_torch():
    diagnose_multihead(MultiHead(8, 2), embed_dim=8, num_heads=2)
    with pytest.raises(CheckFailed, match="wrong values"):
        diagnose_multihead(MultiHead(8, 2, scale_by_embed=True), embed_dim=8, num_heads=2)


def test_generic_helpers():
    with pytest.raises(CheckFailed, match="did you forget a `return`"):
        check_shape(None, (2, 3))
    with pytest.raises(CheckFailed, match=r"dimension 1 \(T\) is 4, expected 3"):
        check_shape(torch.zeros(2, 4), (2, 3), dims=("B", "T"))
    check_shape(torch.zeros(2, 4), (2, None))
    with pytest.raises(CheckFailed, match="contains NaN"):
        check_close(torch.tensor([1.0, float("nan")]), torch.zeros(2))
    with pytest.raises(CheckFailed, match="you forgot the bias"):
        check_close(torch.ones(3), torch.zeros(3), mistakes={"you forgot the bias": torch.ones(3)})
    with pytest.raises(CheckFailed, match="largest difference 0.5"):
        check_close(torch.tensor([0.0, 0.5]), torch.zeros(2))
    x = torch.randn(3, requires_grad=True)
    (x.detach() * 2).sum()
    with pytest.raises(CheckFailed, match="no gradient reached x"):
        check_gradients({"x": x})


def test_checks_hold_no_hidden_test():
    folder = Path(__file__).resolve().parents[2] / "course_lib" / "checks"
    hidden = Path(__file__).resolve().parents[1] / "grader" / "fixtures" / "grader" / "hidden"
    canary = "CANARY-HIDDEN-5e1f0c9a"
    assert canary in (hidden / "fx_attention" / "test_fx_attention.py").read_text()
    for path in folder.glob("*.py"):
        text = path.read_text()
        assert canary not in text, path
