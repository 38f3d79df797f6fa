"""System hardware description: presets, overrides, one-line errors naming the key."""
import pytest

from dram_models.errors import ConfigError
from h2m2sim.system import SystemSpec, list_presets, load_system_preset, resolve_system


def test_presets_load_and_list():
    names = list_presets()
    for want in ("h2m2", "lpddr-only", "hbm8", "mlu370-x4", "a100-80gb", "cpu-ddr5"):
        assert want in names
    for name in names:
        s = load_system_preset(name)
        assert isinstance(s, SystemSpec) and s.sides
        for side in s.sides:
            # no aliasing: the DRAM organization addresses at least the side's capacity
            assert side.dram_spec.organization.capacity_bytes >= side.capacity_bytes


def test_h2m2_numbers():
    s = load_system_preset("h2m2")
    hbm, lp = s.side("hbm"), s.side("lpddr")
    assert hbm.n_channels == 64 and hbm.dram.name == "HBM3-6400"
    assert hbm.bandwidth_gbps == pytest.approx(3276.8)
    assert hbm.capacity_bytes == 96 * 10**9
    assert lp.n_channels == 32 and lp.dram.name == "LPDDR5X-8533"
    assert lp.bandwidth_gbps == pytest.approx(546.13, rel=1e-3)
    assert lp.capacity_bytes == 512 * 10**9
    for side in (hbm, lp):
        c = side.chip
        assert (c.cores, c.freq_ghz, c.mm_rows, c.mm_cols, c.mv_lanes, c.mv_width) == \
            (4, 1.0, 128, 128, 32, 128)
        assert c.spm_buffer_bytes == 16 * 2**20 and c.spm_buffers == 2
    assert s.interconnect.bandwidth_gbps == 960
    assert (s.mmu.page_size, s.mmu.tlb_entries, s.mmu.miss_ns) == (2 * 2**20, 2048, 300)
    assert s.peak_tflops == pytest.approx(2 * 4 * 2 * 128 * 128 / 1e3)


def test_exact_channel_counts_of_approximated_devices():
    assert load_system_preset("mlu370-x4").sides[0].bandwidth_gbps == pytest.approx(307.2)
    assert load_system_preset("cpu-ddr5").sides[0].bandwidth_gbps == pytest.approx(460.8)
    assert load_system_preset("a100-80gb").sides[0].bandwidth_gbps == pytest.approx(2048)


def test_preset_overrides_by_side_name():
    s = resolve_system({"preset": "h2m2", "sides": {"hbm": {"capacity_bytes": "48 GB",
                                                            "chip": {"cores": 8}}},
                        "mmu": {"page_size": "4 KiB", "virtual_bytes": "64 GiB"}})
    assert s.side("hbm").capacity_bytes == 48 * 10**9
    assert s.side("hbm").chip.cores == 8
    assert s.side("lpddr").chip.cores == 4
    assert s.mmu.page_size == 4096


def test_inline_system_and_dram_overrides():
    s = resolve_system({"name": "mine", "sides": [
        {"name": "a", "dram": {"preset": "lpddr5-6400", "controller": {"read_queue": 16}},
         "channels": 8, "capacity_bytes": "1 GiB"}]}, "system")
    a = s.side("a")
    assert a.dram_spec.organization.channels == 8
    assert a.dram.controller.read_queue == 16
    assert a.chip.cores == 4            # Table 2 default


@pytest.mark.parametrize("raw, key", [
    ({"preset": "h2m2", "sides": {"lpddr": {"dram": {"timing": {"tRCD": -3}}}}},
     "system.sides[1].dram.timing.tRCD"),
    ({"preset": "h2m2", "sides": {"hbm": {"capacty_bytes": 5}}}, "system.sides[0].capacty_bytes"),
    ({"preset": "h2m2", "sides": {"hbm": {"capacity_bytes": "1 TB"}}},
     "system.sides[0].capacity_bytes"),
    ({"preset": "h2m2", "sides": {"hbm": {"chip": {"cores": 0}}}}, "system.sides[0].chip.cores"),
    ({"preset": "h2m2", "sides": {"hbm": {"chip": {"preset": "tpu"}}}},
     "system.sides[0].chip.preset"),
    ({"preset": "h2m2", "mmu": {"page_size": 3000}}, "system.mmu.page_size"),
    ({"preset": "h2m2", "mmu": {"tlb_entries": 100, "tlb_ways": 16}}, "system.mmu.tlb_entries"),
    ({"preset": "h2m2", "mmu": {"miss_mode": "walkk"}}, "system.mmu.miss_mode"),
    ({"preset": "h2m3"}, "system.preset"),
    ({"preset": "h2m2", "sides": {"hbmm": {"channels": 4}}}, "system.sides.hbmm"),
    ({"name": "x", "sides": []}, "system.sides"),
    ({"name": "x", "sides": [{"name": "a", "dram": "hbm3-6400", "capacity_bytes": "1 GiB"},
                             {"name": "a", "dram": "hbm3-6400", "capacity_bytes": "1 GiB"}]},
     "system.sides[1].name"),
    ({"preset": "h2m2", "interconnect": {"bandwidth_gbps": 0}},
     "system.interconnect.bandwidth_gbps"),
])
def test_bad_configs_name_the_key(raw, key):
    with pytest.raises(ConfigError) as ei:
        resolve_system(raw, "system")
    err = ei.value
    assert err.key == key, str(err)
    assert "\n" not in str(err)


def test_unknown_preset_suggests():
    with pytest.raises(ConfigError, match="did you mean 'h2m2'"):
        resolve_system("h2m3")


def test_run_config_uses_the_system_resolver():
    from h2m2sim.config import load_config
    cfg = load_config({"system": {"preset": "h2m2"}, "model": "gpt3-175b"})
    assert isinstance(cfg.system, SystemSpec) and cfg.system.side("hbm").n_channels == 64


def test_yaml_file(tmp_path):
    p = tmp_path / "sys.yaml"
    p.write_text("preset: h2m2\nsides:\n  lpddr:\n    channels: 64\n")
    s = resolve_system(str(p))
    assert s.side("lpddr").n_channels == 64
