"""The one registry type: lookups, did-you-mean errors, registration rules."""
import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.registry import Registry


def test_get_returns_the_registered_object_and_decorator_registers():
    reg: Registry[type] = Registry("widget", key="policy.widget")

    @reg.register("round")
    class Round:
        pass

    reg.register("square", int)
    assert reg.get("round") is Round and reg["square"] is int
    assert sorted(reg) == reg.names() == ["round", "square"] and len(reg) == 2


def test_unknown_name_names_the_key_suggests_and_lists():
    reg = Registry("widget", key="policy.widget", hint="or a file")
    reg.register("round", 1)
    reg.register("square", 2)
    with pytest.raises(ConfigError) as err:
        reg.get("rond")
    msg = str(err.value)
    assert msg.startswith("policy.widget: unknown widget 'rond'")
    assert "did you mean 'round'" in msg and "available: round, square (or a file)" in msg
    with pytest.raises(ConfigError, match="^elsewhere: "):
        reg.get("x", "elsewhere")
    with pytest.raises(ConfigError, match="unknown widget"):
        reg.get(["unhashable"])


def test_a_name_holds_one_object():
    reg = Registry("widget")
    reg.register("a", int)
    reg.register("a", int)          # the same object again is harmless
    with pytest.raises(ValueError, match="already registered"):
        reg.register("a", float)


def test_tests_may_swap_entries(monkeypatch):
    reg = Registry("widget")
    reg.register("a", int)
    monkeypatch.setitem(reg, "a", float)
    assert reg.get("a") is float
    monkeypatch.undo()
    assert reg.get("a") is int
