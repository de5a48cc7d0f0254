"""The family contract (course_lib/models/_family.py): names, presets, overrides, fused = manual."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import course_lib.models as models
from course_lib import interop
from course_lib.models._family import CONTRACT, alias
from course_lib.vision import DropPath

MODELS_DIR = Path(models.__file__).parent
FAMILIES = models.families()
PRESET_FAMILY = {name: module for module in FAMILIES.values() for name in module.PRESETS}


def _exempt(module) -> tuple[str, ...]:
    return getattr(module, "CONTRACT_EXEMPT", ())


def _config_names(path: Path) -> dict[str, set[str]]:
    """Config class name -> names it defines (fields, aliases, properties), read from the source."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef) and node.name.endswith("Config"):
            names = set()
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    names.update(t.id for t in item.targets if isinstance(t, ast.Name))
                elif isinstance(item, ast.FunctionDef) and any(
                    isinstance(d, ast.Name) and d.id == "property" for d in item.decorator_list
                ):
                    names.add(item.name)
            found[node.name] = names
    return found


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_config_source_defines_the_contract_names(family):
    module = FAMILIES[family]
    configs = _config_names(Path(module.__file__))
    assert configs, f"{family}.py defines no *Config class"
    required = set(CONTRACT) - set(_exempt(module))
    for cls, names in configs.items():
        missing = sorted(required - names)
        assert not missing, f"{cls} lacks contract name(s) {missing} (course_lib/models/_family.py)"
        assert "fused" not in names, f"{cls}.fused: the switch is called fused_attn"


def test_exemptions_are_only_the_recurrent_families():
    """Only families without dot-product attention may skip names of the contract."""
    exempt = {name for name, module in FAMILIES.items() if _exempt(module)}
    assert exempt == {"seq2seq", "captioning"}
    for name in exempt:
        assert not re.search(
            r"MultiHeadAttention|scaled_dot_product_attention",
            Path(FAMILIES[name].__file__).read_text(),
        )


def test_no_family_keeps_its_own_preset_or_override_helper():
    for path in MODELS_DIR.glob("*.py"):
        source = path.read_text()
        for name in ("_preset", "_check_overrides", "causal_keep_mask"):
            assert not re.search(rf"\bdef {name}\b", source), f"{path.name} defines {name}"


@pytest.mark.parametrize("name", sorted(PRESET_FAMILY))
def test_every_preset_config_answers_to_the_contract(name):
    module = PRESET_FAMILY[name]
    factory = module.PRESETS[name]
    config = factory.config  # made by course_lib.models._family.preset
    for field in set(CONTRACT) - set(_exempt(module)):
        value = getattr(config, field)
        assert value is not None, f"{name}: config.{field} is None"
    assert isinstance(config.dropout, float)


def test_aliases_override_the_checkpoint_named_fields():
    gpt = models.create("gpt-tiny", embed_dim=16, depth=1, num_heads=2, norm_eps=1e-6)
    assert (gpt.config.n_embd, gpt.config.n_layer, gpt.config.n_head) == (16, 1, 2)
    assert gpt.config.layer_norm_eps == 1e-6 and gpt.config.embed_dim == 16
    bert = models.create("bert-tiny", embed_dim=16, num_heads=2, intermediate_size=32)
    assert bert.config.hidden_size == 16 and bert.config.mlp_ratio == 2.0
    vit = models.create("vit-tiny", embed_dim=16, mlp_dim=32)
    assert vit.config.dim == 16 and vit.config.mlp_ratio == 2.0


def test_override_errors_name_the_fields():
    with pytest.raises(TypeError, match=r"unknown GPTConfig field\(s\) \['n_embed'\]; valid"):
        models.create("gpt-tiny", n_embed=16)
    with pytest.raises(TypeError, match="unknown SwinConfig field"):
        models.create("swin-tiny", dim=16)
    with pytest.raises(TypeError, match=r"BertConfig.mlp_ratio is computed .*intermediate_size"):
        models.create("bert-tiny", mlp_ratio=2.0)
    with pytest.raises(TypeError, match="overridden twice"):
        models.create("gpt-tiny", n_embd=16, embed_dim=16)


def test_alias_is_a_read_only_property():
    assert isinstance(vars(models.gpt.GPTConfig)["embed_dim"], alias)
    with pytest.raises(dataclasses.FrozenInstanceError):
        models.gpt.GPTConfig().embed_dim = 8


def test_interop_reads_the_one_registry():
    assert set(interop.hf_converters()) == {
        "GPT2Model", "GPT2LMHeadModel", "BertModel", "BertForPreTraining", "BertForMaskedLM",
        "ViTModel", "ViTForImageClassification", "SwinModel", "SwinForImageClassification",
    }  # fmt: skip
    with pytest.raises(TypeError, match="no timm loader for a GPT"):
        interop.from_timm_state_dict("gpt-tiny", {})


ATTENTION_PRESETS = sorted(n for n, m in PRESET_FAMILY.items() if "fused_attn" not in _exempt(m))


def _tiny(name: str, **overrides) -> nn.Module:
    module = PRESET_FAMILY[name]
    torch.manual_seed(0)
    return module.PRESETS[name](**{**module.TINY, **overrides})


def _main(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, tuple | list):
        return _main(out[0])
    if isinstance(out, dict):
        return _main(next(iter(out.values())))
    return _main(getattr(out, dataclasses.fields(out)[0].name))


@pytest.mark.parametrize("name", ATTENTION_PRESETS)
def test_manual_and_fused_paths_agree(name):
    fused = _tiny(name, fused_attn=True).eval()
    manual = _tiny(name, fused_attn=False).eval()
    manual.load_state_dict(fused.state_dict())
    inputs, _ = PRESET_FAMILY[name].example_batch(fused, batch_size=2)
    with torch.no_grad():
        a, b = _main(fused(**inputs)), _main(manual(**inputs))
    torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def _one_preset_per_family() -> list[str]:
    seen, names = set(), []
    for name in ATTENTION_PRESETS:
        if PRESET_FAMILY[name] not in seen:
            seen.add(PRESET_FAMILY[name])
            names.append(name)
    return names


@pytest.mark.parametrize("fused_attn", [True, False])
@pytest.mark.parametrize("name", _one_preset_per_family())
def test_config_dropout_reaches_the_attention_weights(name, fused_attn):
    """With every dropout *module* (embeddings, residuals, MLP) off, training is still random."""
    model = _tiny(name, dropout=0.5, fused_attn=fused_attn).train()
    for m in model.modules():
        if isinstance(m, nn.Dropout | DropPath):
            m.p = 0.0
    inputs, _ = PRESET_FAMILY[name].example_batch(model, batch_size=2)
    torch.manual_seed(1)
    a = _main(model(**inputs))
    torch.manual_seed(2)
    b = _main(model(**inputs))
    assert not torch.allclose(a, b), f"{name}: config.dropout never reaches the attention weights"
    model.eval()
    torch.testing.assert_close(_main(model(**inputs)), _main(model(**inputs)))
