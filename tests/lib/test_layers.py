"""LayerNorm against nn.LayerNorm (values and gradients) and FeedForward against its formula."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_lib.layers import FeedForward, LayerNorm


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_equals_torch_values_and_gradients(dtype, tol, eps, bias):
    torch.manual_seed(0)
    ours = LayerNorm(6, eps=eps, bias=bias).to(dtype)
    ref = nn.LayerNorm(6, eps=eps, bias=bias).to(dtype)
    with torch.no_grad():  # non-trivial gamma and beta
        ours.weight.normal_()
        ref.weight.copy_(ours.weight)
        if bias:
            ours.bias.normal_()
            ref.bias.copy_(ours.bias)
    x = (torch.randn(3, 4, 6) * 5 + 2).to(dtype).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = ours(x), ref(x_ref)
    torch.testing.assert_close(y, y_ref, atol=tol, rtol=tol)
    upstream = torch.randn_like(y)
    (y * upstream).sum().backward()
    (y_ref * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad, atol=tol, rtol=tol)
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad, atol=tol, rtol=tol)
    if bias:
        torch.testing.assert_close(ours.bias.grad, ref.bias.grad, atol=tol, rtol=tol)


def test_layer_norm_normalises_each_token_and_checks_its_input():
    ln = LayerNorm(16)
    y = ln(torch.randn(5, 16) * 3 + 7)
    torch.testing.assert_close(y.mean(-1), torch.zeros(5), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(-1, unbiased=False), torch.ones(5), atol=1e-3, rtol=0)
    with pytest.raises(ValueError, match="last dim 16"):
        ln(torch.randn(5, 8))


@pytest.mark.parametrize(
    "activation,fn",
    [("gelu", F.gelu), ("relu", F.relu), ("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"))],
)
def test_feed_forward_is_fc2_of_activation_of_fc1(activation, fn):
    torch.manual_seed(0)
    ff = FeedForward(6, 10, activation=activation).double()
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    expected = fn(x @ ff.fc1.weight.T + ff.fc1.bias) @ ff.fc2.weight.T + ff.fc2.bias
    torch.testing.assert_close(ff(x), expected)


def test_feed_forward_dropout_and_bad_activation():
    torch.manual_seed(0)
    ff = FeedForward(4, 8, dropout=0.5)
    x = torch.randn(3, 4)
    ff.eval()
    torch.testing.assert_close(ff(x), ff(x))
    ff.train()
    assert not torch.allclose(ff(x), ff(x))
    with pytest.raises(ValueError, match="activation must be one of"):
        FeedForward(4, 8, activation="swish")
