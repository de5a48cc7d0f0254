"""timm checkpoints load into course_lib's ViT, Swin and DaViT: same weights, same logits.

The oracle is timm's own model code (an independent implementation): a random timm model's
``state_dict()`` goes through ``course_lib.interop.from_timm_state_dict`` and both models see the
same random images. timm imports ``torchvision`` at import time for code these models never run;
torchvision has no CPU wheel for our torch pin, so a stand-in package answers those imports while
timm is imported (and is removed again afterwards).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

import pytest
import torch

from course_lib.interop import from_timm_state_dict

TOL = 1e-5


class _Anything(type):
    """A stand-in class whose attributes are again stand-in classes (``InterpolationMode.X``)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})


class _TorchvisionStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StubModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


@pytest.fixture(scope="module")
def timm():
    if importlib.util.find_spec("timm") is None:
        pytest.skip("timm is not installed (make install puts it in .venv)")
    if importlib.util.find_spec("torchvision") is not None:
        import timm.models

        return timm
    finder = _TorchvisionStub()
    sys.meta_path.insert(0, finder)
    try:
        import timm.models.davit
        import timm.models.swin_transformer
        import timm.models.vision_transformer
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
            del sys.modules[name]
    return timm


def _randomise(model: torch.nn.Module) -> torch.nn.Module:
    """Random weights everywhere (LayerNorm gains and biases too), so no term can hide."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.2 * torch.randn(p.shape, generator=generator))
    return model.eval()


def _images(size: int, batch: int = 2) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(1))


def _max_diff(reference: torch.nn.Module, ours: torch.nn.Module, images: torch.Tensor) -> float:
    with torch.no_grad():
        want, got = reference(images), ours(images)
    assert want.shape == got.shape and want.abs().max() > 0.05  # a real signal, not ~zero
    return (want - got).abs().max().item()


@pytest.mark.parametrize("fused_attn", [True, False])
def test_vit_same_weights_same_logits(timm, fused_attn):
    reference = _randomise(
        timm.models.vision_transformer.VisionTransformer(
            img_size=16,
            patch_size=4,
            embed_dim=16,
            depth=2,
            num_heads=2,
            mlp_ratio=2.0,
            num_classes=5,
        )  # fmt: skip
    )
    ours = from_timm_state_dict(
        "vit-tiny", reference.state_dict(), image_size=16, patch_size=4, dim=16, depth=2,
        num_heads=2, mlp_dim=32, num_classes=5, fused_attn=fused_attn,
    )  # fmt: skip
    assert _max_diff(reference, ours, _images(16)) <= TOL


SWIN_CASES = {
    # image, window, depths: what the stages do (patch size 2, so the first map is image / 2)
    "shifted windows (16x16 and 8x8 maps, window 4)": (32, 4, (2, 2)),
    "window >= map: window shrinks, no shift (8x8 and 4x4 maps, window 8)": (16, 8, (2, 2)),
    "pads without shifting (12x12 then 6x6 maps, window 4, one block a stage)": (24, 4, (1, 1)),
    "pads 10x10 to 12x12 and 5x5 to 6x6 (window 3, one block a stage)": (20, 3, (1, 1)),
}


@pytest.mark.parametrize("case", sorted(SWIN_CASES))
def test_swin_same_weights_same_logits(timm, case):
    image, window, depths = SWIN_CASES[case]
    heads = (1, 2, 4)[: len(depths)]
    reference = _randomise(
        timm.models.swin_transformer.SwinTransformer(
            img_size=image,
            patch_size=2,
            embed_dim=8,
            depths=depths,
            num_heads=heads,
            window_size=window,
            num_classes=5,
        )  # fmt: skip
    )
    ours = from_timm_state_dict(
        "swin-tiny", reference.state_dict(), image_size=image, patch_size=2, embed_dim=8,
        depths=depths, num_heads=heads, window_size=window, num_classes=5,
    )  # fmt: skip
    assert _max_diff(reference, ours, _images(image)) <= TOL


def test_swin_pad_then_shift_differs_from_timm_as_documented(timm):
    """A 13x13 map, window 4: padded by 3, shifted by 2. timm shifts first, course_lib pads first.

    course_lib follows the authors' detection code and Hugging Face (tests/lib/test_swin.py); the
    docstring of ``course_lib.models.swin.from_timm`` states the difference.
    """
    sizes = dict(image_size=26, patch_size=2, embed_dim=8, depths=(2,), num_heads=(2,),
                 window_size=4, num_classes=5)  # fmt: skip
    reference = _randomise(
        timm.models.swin_transformer.SwinTransformer(
            img_size=26,
            patch_size=2,
            embed_dim=8,
            depths=(2,),
            num_heads=(2,),
            window_size=4,
            num_classes=5,
        )  # fmt: skip
    )
    ours = from_timm_state_dict("swin-tiny", reference.state_dict(), **sizes)
    assert _max_diff(reference, ours, _images(26)) > 1e-4


@pytest.mark.parametrize("image", [32, 28])  # 28: the 7x7 map is padded to the 2x2 windows
@pytest.mark.parametrize("fused_attn", [True, False])
def test_davit_same_weights_same_logits(timm, image, fused_attn):
    reference = _randomise(
        timm.models.davit.DaVit(
            depths=(1, 2), embed_dims=(16, 32), num_heads=(2, 4), window_size=2, num_classes=5
        )
    )
    ours = from_timm_state_dict(
        "davit-tiny", reference.state_dict(), image_size=image, patch_size=4,
        embed_dims=(16, 32), depths=(1, 2), num_heads=(2, 4), num_groups=(2, 4), window_size=2,
        num_classes=5, fused_attn=fused_attn,
    )  # fmt: skip
    assert _max_diff(reference, ours, _images(image)) <= TOL


def test_davit_channel_attention_needs_the_qkv_permutation(timm):
    """Loading the channel blocks' q, k, v chunks in the authors' order gives other logits."""
    reference = _randomise(
        timm.models.davit.DaVit(
            depths=(1,), embed_dims=(16,), num_heads=(2,), window_size=2, num_classes=5
        )
    )
    state = reference.state_dict()
    sizes = dict(image_size=16, patch_size=4, embed_dims=(16,), depths=(1,), num_heads=(2,),
                 num_groups=(2,), window_size=2, num_classes=5)  # fmt: skip
    ours = from_timm_state_dict("davit-tiny", state, **sizes)
    key = "stages.0.blocks.0.1.attn.qkv.weight"
    unpermuted = from_timm_state_dict("davit-tiny", state, **sizes)
    with torch.no_grad():  # put back the chunks as they are stored in the checkpoint
        unpermuted.stages[0][1].attn.qkv.weight.copy_(state[key])
        unpermuted.stages[0][1].attn.qkv.bias.copy_(state[key.replace("weight", "bias")])
    images = _images(16)
    assert _max_diff(reference, ours, images) <= TOL
    assert _max_diff(reference, unpermuted, images) > 1e-3


def test_mismatched_checkpoint_is_refused(timm):
    reference = timm.models.vision_transformer.VisionTransformer(
        img_size=16, patch_size=4, embed_dim=16, depth=2, num_heads=2, num_classes=5
    )
    with pytest.raises(ValueError, match="build the model with the checkpoint's sizes"):
        from_timm_state_dict("vit-tiny", reference.state_dict(), num_classes=5)  # dim 32
    state = dict(reference.state_dict(), **{"blocks.0.ls1.gamma": torch.ones(16)})
    with pytest.raises(KeyError, match="blocks.0.ls1.gamma"):
        from_timm_state_dict(
            "vit-tiny", state, image_size=16, patch_size=4, dim=16, depth=2, num_heads=2,
            mlp_dim=64, num_classes=5,
        )  # fmt: skip
