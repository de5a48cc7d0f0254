"""Model families, one file each, reachable by name: ``create("gpt2", n_layer=2)``.

Each family module defines a module-level ``PRESETS`` dict mapping a preset name to a function
``(**overrides) -> nn.Module``; the overrides are applied to the family's frozen config with
``dataclasses.replace``. Modules are discovered here, so adding a family edits nothing but its file.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable

from torch import nn

_REGISTRY: dict[str, Callable[..., nn.Module]] | None = None


def _registry() -> dict[str, Callable[..., nn.Module]]:
    global _REGISTRY
    if _REGISTRY is None:
        registry: dict[str, Callable[..., nn.Module]] = {}
        for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            module = importlib.import_module(f"{__name__}.{info.name}")
            for name, factory in getattr(module, "PRESETS", {}).items():
                if name in registry:
                    raise RuntimeError(f"preset {name!r} is defined twice (again in {info.name})")
                registry[name] = factory
        _REGISTRY = registry
    return _REGISTRY


def available_models() -> list[str]:
    """All preset names ``create`` accepts, sorted."""
    return sorted(_registry())


def create(name: str, **overrides) -> nn.Module:
    """Build the preset ``name`` with config fields replaced by ``overrides``.

    >>> model = create("gpt2", n_layer=2)  # doctest: +SKIP
    """
    registry = _registry()
    if name not in registry:
        import difflib

        close = difflib.get_close_matches(name, registry, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"unknown model {name!r}.{hint} Available: {', '.join(sorted(registry))}")
    return registry[name](**overrides)
