"""Putting xpress_ext in place of vLLM's XPress kernels and refiner head.

    import xpress_ext.vllm_integration as xv
    handle = xv.install()          # before vLLM's spec-decode worker imports its kernels
    ...
    handle.uninstall()             # restores what was there

``install`` registers ``xpress_ext.kernels`` under vLLM's kernel module path (so that
``import vllm.v1.worker.gpu.spec_decode.xpress.kernels`` and ``from ...xpress import kernels``
both give this package's module) and, given the module that defines vLLM's head, replaces its
``XPressRefinerHead`` attribute with ``xpress_ext.XPressRefinerHead`` (same constructor,
methods and HYBRID_KEY_MAP).  Call sites do not change.  If a module already imported the old
kernels with ``from ... import fused_add_argmax_to_blk``, that name is not rebound: install
before vLLM's worker modules are imported (e.g. in a plugin's ``register()``).
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field

from . import kernels as _kernels
from .head import HYBRID_KEY_MAP, XPressRefinerHead

VLLM_KERNELS_MODULE = "vllm.v1.worker.gpu.spec_decode.xpress.kernels"

_MISSING = object()


@dataclass
class Installed:
    """What install() changed, so that uninstall() can put it back."""

    kernels_module: str
    head_module: str | None
    _saved: list = field(default_factory=list)  # (undo callable) in order

    def uninstall(self) -> None:
        while self._saved:
            self._saved.pop()()


def _set_attr(saved: list, obj, name: str, value) -> None:
    old = getattr(obj, name, _MISSING)
    setattr(obj, name, value)
    saved.append(lambda: delattr(obj, name) if old is _MISSING else setattr(obj, name, old))


def install(kernels_module: str = VLLM_KERNELS_MODULE, head_module: str | None = None,
            head_attr: str = "XPressRefinerHead") -> Installed:
    """Installs xpress_ext in place of vLLM's XPress kernels (and head, if ``head_module`` names
    the module that defines it).  The parent package of ``kernels_module`` must be importable
    (a vLLM install); the kernel module itself need not be."""
    handle = Installed(kernels_module, head_module)
    saved = handle._saved
    parent_name, _, leaf = kernels_module.rpartition(".")
    parent = importlib.import_module(parent_name)
    old_module = sys.modules.get(kernels_module, _MISSING)
    sys.modules[kernels_module] = _kernels
    saved.append(lambda: sys.modules.pop(kernels_module, None) if old_module is _MISSING
                 else sys.modules.__setitem__(kernels_module, old_module))
    _set_attr(saved, parent, leaf, _kernels)
    if head_module is not None:
        module = importlib.import_module(head_module)
        _set_attr(saved, module, head_attr, XPressRefinerHead)
        if hasattr(module, "HYBRID_KEY_MAP"):
            _set_attr(saved, module, "HYBRID_KEY_MAP", HYBRID_KEY_MAP)
    return handle
