"""engine.flags.overridden: holds a declared flag inside a block and restores the environment after it."""
from __future__ import annotations

import os

import pytest

from engine import flags


def test_overridden_holds_then_restores_an_unset_flag(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("VT_KERNELS", raising=False)
    with flags.overridden("VT_KERNELS", False):
        assert flags.enabled("VT_KERNELS") is False
    assert "VT_KERNELS" not in os.environ and flags.enabled("VT_KERNELS") is True


def test_overridden_restores_a_set_value_even_after_an_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("VT_GEMV", "yes")
    with pytest.raises(RuntimeError), flags.overridden("VT_GEMV", False):
        assert flags.enabled("VT_GEMV") is False
        raise RuntimeError("inside")
    assert os.environ["VT_GEMV"] == "yes"


def test_overridden_refuses_a_value_of_the_wrong_type():
    with pytest.raises(TypeError, match="VT_CUDA_ARCHS: True does not fit a string flag"):
        with flags.overridden("VT_CUDA_ARCHS", True):
            pass
    with pytest.raises(KeyError):
        with flags.overridden("VT_NOT_DECLARED", True):
            pass
