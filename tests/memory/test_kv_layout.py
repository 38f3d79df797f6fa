"""KVLayout: the value a KV allocator's layout travels as."""
import pytest

from h2m2sim.errors import ConfigError
from h2m2sim.memory.kv_layout import CONTIGUOUS, KVLayout


def test_names_round_trip_and_order_by_name():
    layouts = [CONTIGUOUS, KVLayout.paged(16), KVLayout.paged(128)]
    assert [str(x) for x in layouts] == ["contiguous", "paged:16", "paged:128"]
    assert [KVLayout.parse(str(x)) for x in layouts] == layouts
    assert KVLayout.paged(16) == KVLayout("paged", 16) and hash(KVLayout.paged(16)) == \
        hash(KVLayout("paged", 16))
    assert not CONTIGUOUS.is_paged and KVLayout.paged(1).is_paged


@pytest.mark.parametrize("kind, block, key", [
    ("paged", 0, "kv_layout.block_tokens"), ("paged", -16, "kv_layout.block_tokens"),
    ("contiguous", 16, "kv_layout.block_tokens"), ("scattered", 0, "kv_layout"),
    ("paged", 16.0, "kv_layout.block_tokens"), ("paged", True, "kv_layout.block_tokens"),
])
def test_nonsense_is_refused(kind, block, key):
    with pytest.raises(ConfigError) as e:
        KVLayout(kind, block)
    assert e.value.key == key


@pytest.mark.parametrize("text", ["paged", "paged:", "paged:0", "paged:x", "Contiguous",
                                  "paged:-3", ""])
def test_bad_names_are_refused(text):
    with pytest.raises(ConfigError, match="unknown KV layout"):
        KVLayout.parse(text)
