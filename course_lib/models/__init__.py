"""Model families, one file each, reachable by name: ``create("gpt2", n_layer=2)``.

Every family follows the contract written in :mod:`course_lib.models._family` (config names,
presets, overrides, test protocol). :func:`families` discovers the family modules once; it is the
one registry that :func:`create`, :func:`available_models` and :mod:`course_lib.interop` read, so
adding a family edits nothing but its file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType

from torch import nn

_FAMILIES: dict[str, ModuleType] | None = None
_REGISTRY: dict[str, Callable[..., nn.Module]] | None = None


def families() -> dict[str, ModuleType]:
    """Family name (module name) -> module, for every module that defines ``PRESETS``."""
    global _FAMILIES
    if _FAMILIES is None:
        found = {}
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if info.name.startswith("_"):
                continue
            module = importlib.import_module(f"{__name__}.{info.name}")
            if hasattr(module, "PRESETS"):
                found[info.name] = module
        _FAMILIES = found
    return _FAMILIES


def registry() -> dict[str, Callable[..., nn.Module]]:
    """Preset name -> factory ``(**overrides) -> nn.Module``, over all families."""
    global _REGISTRY
    if _REGISTRY is None:
        presets: dict[str, Callable[..., nn.Module]] = {}
        for family, module in families().items():
            for name, factory in module.PRESETS.items():
                if name in presets:
                    raise RuntimeError(f"preset {name!r} is defined twice (again in {family})")
                presets[name] = factory
        _REGISTRY = presets
    return _REGISTRY


def family_of(name: str) -> ModuleType:
    """The family module that defines the preset ``name``."""
    for module in families().values():
        if name in module.PRESETS:
            return module
    raise ValueError(f"unknown model {name!r}")


def available_models() -> list[str]:
    """All preset names ``create`` accepts, sorted."""
    return sorted(registry())


def create(name: str, **overrides) -> nn.Module:
    """Build the preset ``name`` with config fields replaced by ``overrides``.

    Overrides may use a family's own field names or the contract's names
    (``embed_dim``, ``depth``, ``num_heads``, ...; see :mod:`course_lib.models._family`).

    >>> model = create("gpt2", n_layer=2)  # doctest: +SKIP
    """
    presets = registry()
    if name not in presets:
        import difflib

        close = difflib.get_close_matches(name, presets, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"unknown model {name!r}.{hint} Available: {', '.join(sorted(presets))}")
    return presets[name](**overrides)
