"""Red-team corpus, issue 35 ("grader-isolation-2"): verdict state reachable by attribute walks,
fused kernels outside the tables, library source recompiled under another name.

Each attack runs in a real worker (a fallback-mode zygote: what every host can start) through the
trusted proxy, under the A2 suite's forbidden specs; each failed before the fix (a forbidden call
that was not reported) and is now a failed test: a forbidden call, or tampering."""

from __future__ import annotations

import pytest
import torch
from fallback_worker import fallback_zygote, student_session

from autograder.host import proxy
from autograder.wire.forbid import expand

FUSED = expand(["sdpa", "multihead_attention"])

CODE = '''
import sys
import torch
import torch.nn.functional as F

def _mha(x, w, b, ow, ob):
    return F.multi_head_attention_forward(
        x, x, x, 8, 2, w, b, None, None, False, 0.0, ow, ob, training=False,
        need_weights=False)[0]

def through_the_module_hook(x, w, b, ow, ob):
    """hooks -> the detector's pre-hook -> __globals__ -> _ACTIVE[0] = None around the call."""
    hooks = torch.nn.modules.module._global_forward_pre_hooks
    for hook in list(dict.values(hooks)):
        names = getattr(hook, "__glo" + "bals__")
        active = names.get("_ACTIVE")
        if active is not None:
            saved, active[0] = active[0], None
            try:
                return _mha(x, w, b, ow, ob)
            finally:
                active[0] = saved
    return _mha(x, w, b, ow, ob)

def through_the_output_capture(x, w, b, ow, ob):
    """sys.stdout's class -> the worker module -> the detector's violations, cleared."""
    out = _mha(x, w, b, ow, ob)
    names = getattr(type(sys.stdout).write, "__glo" + "bals__")
    detector = names.get("Detector")
    if detector is not None:
        enter = getattr(detector.__enter__, "__glo" + "bals__")
        active = enter.get("_ACTIVE")
        if active and active[0] is not None:
            active[0].violations.clear()
        records = enter.get("_RECORDS")
        if records is not None:
            records.clear()
    return out

def capture_namespace():
    return sorted(getattr(type(sys.stdout).write, "__glo" + "bals__"))

def hook_defaults_cleared(x, w, b, ow, ob):
    """What the sealed hooks still show: their defaults; clearing the records they reach."""
    out = _mha(x, w, b, ow, ob)
    for mode in [torch._C._get_function_stack_at(i)
                 for i in range(torch._C._len_torch_function_stack())]:
        for value in type(mode).__torch_function__.__defaults__:
            owner = getattr(value, "__defaults__", None) or ()
            for inner in owner:
                target = getattr(inner, "__self__", None)
                if hasattr(target, "clear"):
                    target.clear()
    return out

def gqa_math(q, k, v):
    return torch.ops.aten._scaled_dot_product_attention_math(q, k, v, enable_gqa=True)[0]

def gqa_builtin(q, k, v):
    return torch._scaled_dot_product_attention_math(q, k, v, enable_gqa=True)[0]

def gqa_overload_without_modes(q, k, v):
    with torch._C.DisableTorchFunction():
        op = torch.ops.aten._scaled_dot_product_attention_math.default
        return op(q, k, v, enable_gqa=True)[0]

import inspect as _inspect
_source = _inspect.getsource(F.multi_head_attention_forward)
_names = dict(vars(F))
exec(compile(_source, "my_attention.py", "exec"), _names)

def recompiled(x, w, b, ow, ob):
    return _names["multi_head_attention_forward"](  # need_weights: no sdpa inside
        x, x, x, 8, 2, w, b, None, None, False, 0.0, ow, ob, training=False,
        need_weights=True)[0]

def honest(q, k, v):
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    return scores.softmax(-1) @ v
'''


@pytest.fixture(scope="module")
def zygote():
    with fallback_zygote("ag-scratch-rt3-", cpu=60) as client:
        yield client


@pytest.fixture(scope="module")
def student(zygote):
    with student_session(zygote, CODE, 300) as pair:
        yield pair


def _mha_args():
    mha = torch.nn.MultiheadAttention(8, 2)
    x = torch.randn(3, 1, 8)
    return x, mha.in_proj_weight.detach(), mha.in_proj_bias.detach(), \
        mha.out_proj.weight.detach(), mha.out_proj.bias.detach()  # fmt: skip


def _qkv():
    return torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)


def _refused(st, state, name, args):
    state.forbid, state.fatal = FUSED, []
    try:
        with pytest.raises(proxy.ForbiddenCall):
            getattr(st, name)(*args)
        assert state.fatal, name
        return " ".join(map(str, state.fatal))
    finally:
        state.forbid, state.fatal = [], []


@pytest.mark.parametrize(
    "attack", ["through_the_module_hook", "through_the_output_capture", "hook_defaults_cleared"]
)
def test_verdict_state_is_not_reachable_by_attribute_walks(student, attack):
    st, state = student
    _refused(st, state, attack, _mha_args())


def test_what_student_code_holds_leads_nowhere(student):
    st, state = student
    assert st.capture_namespace() == ["__builtins__"]


@pytest.mark.parametrize("attack", ["gqa_math", "gqa_builtin", "gqa_overload_without_modes"])
def test_fused_kernels_are_matched_by_their_schema_name(student, attack):
    st, state = student
    said = _refused(st, state, attack, _qkv())
    assert "scaled_dot_product" in said


def test_library_source_recompiled_under_another_name_is_caught(student):
    st, state = student
    said = _refused(st, state, "recompiled", _mha_args())
    assert "multi_head_attention_forward" in said


def test_an_honest_grouped_query_attention_passes(student):
    st, state = student
    state.forbid, state.fatal = FUSED, []
    q, k, v = _qkv()
    assert st.honest(q, k, v).shape == q.shape
    assert not state.fatal
    state.forbid = []
