"""DRAM standards as data.

A :class:`DramSpec` describes one DRAM configuration: its organization (channels,
pseudo-channels, ranks, bank groups, banks, rows, columns, widths, burst length), its
clock, its timing parameters in command-clock cycles (CK), how many command-bus slots each
command occupies, and the default controller settings. Presets ship as YAML files in
``dram_models/presets/`` (one per standard, each value commented with its source); a user
can load a preset, override any field, or write a whole new standard in YAML.

Time units: timing parameters are in CK cycles of the standard (``tCK_ps`` picoseconds
each). Command-bus occupancy is in CK and may be fractional (HBM3 row commands take 1.5 or
0.5 CK); the engine then runs on a finer *tick* (``ticks_per_ck``) so every quantity is an
integer number of ticks. Bandwidths are GB/s = 1e9 bytes/s.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path
from typing import Any, Literal, Optional


from . import yamlio
from .errors import ConfigError
from .schema import deep_merge, load, param, suggest, to_dict

PRESET_DIR = Path(__file__).resolve().parent / "presets"

Family = Literal["ddr4", "ddr5", "lpddr4", "lpddr5", "hbm2", "hbm3"]


#: Limits of what the engine can hold: it keeps state per bank, addresses are 64-bit,
#: and timings are added up in 64-bit ticks. Far beyond any standard (HBM3: 64 banks per
#: channel; refresh intervals of ~10^4 CK).
MAX_BANKS_PER_CHANNEL = 1024
MAX_BANKS = 1 << 22
MAX_TIMING_CK = 1 << 24
#: Longest command-bus occupancy of one command (standards use 0.5-2 CK).
MAX_SLOTS_CK = 16


@dataclasses.dataclass(frozen=True, kw_only=True)
class Organization:
    """How a DRAM configuration is built. A *channel* has its own controller and command
    bus; a *pseudo-channel* (HBM) has its own data bus but shares the channel's command
    buses; *ranks* (HBM: stack IDs) share a (pseudo-)channel's data bus."""

    channels: int = param(1, ge=1, doc="independent channels (one controller each)")
    pseudo_channels: int = param(1, ge=1, doc="pseudo-channels per channel (HBM: 2)")
    ranks: int = param(1, ge=1, doc="ranks per (pseudo-)channel (HBM: stack IDs)")
    bank_groups: int = param(1, ge=1, doc="bank groups per rank")
    banks_per_group: int = param(ge=1, doc="banks per bank group")
    rows: int = param(ge=1, doc="rows per bank")
    columns: int = param(ge=1, doc="columns per row, in units of one data-bus word")
    channel_width_bits: int = param(ge=1, le=4096, doc="data-bus width of one (pseudo-)channel",
                                    unit="bits")
    burst_length: int = param(ge=1, doc="data-bus beats per column access (BL)")
    prefetch: Optional[int] = param(None, ge=1, doc="columns fetched per access "
                                    "(default: burst_length)")

    def _check(self):
        # channels may be any count (the mapping then interleaves them modulo); every
        # level below is addressed by bit slices
        for name in ("pseudo_channels", "ranks", "bank_groups", "banks_per_group", "rows"):
            v = getattr(self, name)
            if v & (v - 1):
                raise ConfigError(name, f"must be a power of two (address bits), got {v}")
        bits = self.channel_width_bits * self.burst_length
        if bits % 8 or (bits // 8) & (bits // 8 - 1):
            raise ConfigError("channel_width_bits", f"a burst (channel_width_bits x "
                              f"burst_length = {bits} bits) must be a power-of-two number "
                              "of bytes: addresses are split into bit fields")
        banks = self.pseudo_channels * self.ranks * self.banks
        if banks > MAX_BANKS_PER_CHANNEL:
            raise ConfigError("banks_per_group", f"{banks} banks per channel (pseudo-"
                              f"channels x ranks x bank groups x banks); the engine keeps "
                              f"state per bank and takes at most {MAX_BANKS_PER_CHANNEL}")
        if self.channels * banks > MAX_BANKS or self.capacity_bytes >= 2**63:
            raise ConfigError("channels", f"{self.channels} channels of {banks} banks "
                              f"({self.capacity_bytes:.3g} bytes): at most {MAX_BANKS} "
                              "banks and 2**63 bytes in one memory")
        if self.columns % self.column_step:
            raise ConfigError("columns", f"must be a multiple of the prefetch "
                              f"({self.column_step}), got {self.columns}")
        bursts = self.columns // self.column_step
        if bursts & (bursts - 1):
            raise ConfigError("columns", f"columns / prefetch must be a power of two, got "
                              f"{bursts}")

    @property
    def column_step(self) -> int:
        return self.prefetch or self.burst_length

    @property
    def burst_bytes(self) -> int:
        """Bytes moved by one column access (one request)."""
        return self.channel_width_bits * self.burst_length // 8

    @property
    def bursts_per_row(self) -> int:
        return self.columns // self.column_step

    @property
    def row_bytes(self) -> int:
        """Bytes in one row (page) of one (pseudo-)channel rank."""
        return self.bursts_per_row * self.burst_bytes

    @property
    def banks(self) -> int:
        """Banks per rank."""
        return self.bank_groups * self.banks_per_group

    @property
    def capacity_bytes(self) -> int:
        return (self.channels * self.pseudo_channels * self.ranks * self.banks * self.rows
                * self.row_bytes)


#: Timings of refresh itself (the others must fit between two refreshes).
_REFRESH_TIMINGS = ("tREFI", "tREFIpb", "tRFC", "tRFCpb")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timing:
    """Timing parameters in CK cycles. Optional ones default as documented."""

    tCL: int = param(gt=0, unit="CK", doc="read latency RL: RD command to first data")
    tCWL: int = param(gt=0, unit="CK", doc="write latency WL: WR command to first data")
    tRCD: int = param(gt=0, unit="CK", doc="ACT to RD")
    tRCDWR: Optional[int] = param(None, gt=0, unit="CK", doc="ACT to WR (default tRCD)")
    tRP: int = param(gt=0, unit="CK", doc="PRE (one bank) to ACT")
    tRPab: Optional[int] = param(None, gt=0, unit="CK", doc="PREA (all banks) to ACT "
                                 "(default tRP)")
    tRAS: int = param(gt=0, unit="CK", doc="ACT to PRE")
    tRC: int = param(gt=0, unit="CK", doc="ACT to ACT, same bank")
    tWR: int = param(gt=0, unit="CK", doc="end of write data to PRE (write recovery)")
    tRTP: int = param(gt=0, unit="CK", doc="RD to PRE")
    tCCD_S: int = param(gt=0, unit="CK", doc="column to column, different bank group")
    tCCD_L: int = param(gt=0, unit="CK", doc="column to column, same bank group")
    tCCD_L_WR: Optional[int] = param(None, gt=0, unit="CK",
                                     doc="WR to WR, same bank group (default tCCD_L)")
    tRRD_S: int = param(gt=0, unit="CK", doc="ACT to ACT, different bank group")
    tRRD_L: int = param(gt=0, unit="CK", doc="ACT to ACT, same bank group")
    tFAW: int = param(gt=0, unit="CK", doc="window holding at most four ACTs")
    tWTR_S: int = param(gt=0, unit="CK", doc="end of write data to RD, different bank "
                        "group")
    tWTR_L: int = param(gt=0, unit="CK", doc="end of write data to RD, same bank group")
    tRTW: int = param(gt=0, unit="CK", doc="RD to WR (bus turnaround), same rank")
    tRTRS: int = param(1, ge=0, unit="CK", doc="extra gap when the data bus switches "
                       "rank / stack ID")
    tPPD: int = param(0, ge=0, unit="CK", doc="PRE to PRE, same rank")
    tRFC: int = param(gt=0, unit="CK", doc="all-bank REF to next command, same rank")
    tRFCpb: Optional[int] = param(None, gt=0, unit="CK", doc="per-bank REF duration")
    tREFI: int = param(gt=0, unit="CK", doc="average all-bank refresh interval")
    tREFIpb: Optional[int] = param(None, gt=0, unit="CK", doc="average per-bank refresh "
                                   "interval (default tREFI / banks)")
    tPBR2PBR: Optional[int] = param(None, gt=0, unit="CK", doc="per-bank REF to per-bank "
                                    "REF, same rank (default tRRD_S)")
    tPBR2ACT: Optional[int] = param(None, gt=0, unit="CK", doc="per-bank REF to ACT of "
                                    "another bank, same rank (default tRRD_S)")

    def _check(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None and v > MAX_TIMING_CK:
                raise ConfigError(f.name, f"must be <= {MAX_TIMING_CK} CK, got {v}")
        if self.tRC < self.tRAS + self.tRP:
            raise ConfigError("tRC", f"must be >= tRAS + tRP = {self.tRAS + self.tRP}, "
                              f"got {self.tRC}")
        if self.tRAS < self.tRCD:
            raise ConfigError("tRAS", f"must be >= tRCD = {self.tRCD}, got {self.tRAS}")
        if self.tCCD_L < self.tCCD_S:
            raise ConfigError("tCCD_L", f"must be >= tCCD_S = {self.tCCD_S}, got "
                              f"{self.tCCD_L}")
        if self.tRRD_L < self.tRRD_S:
            raise ConfigError("tRRD_L", f"must be >= tRRD_S = {self.tRRD_S}, got "
                              f"{self.tRRD_L}")
        if self.tWTR_L < self.tWTR_S:
            raise ConfigError("tWTR_L", f"must be >= tWTR_S = {self.tWTR_S}, got "
                              f"{self.tWTR_L}")
        if self.tREFI <= self.tRFC:
            raise ConfigError("tREFI", f"must be > tRFC = {self.tRFC}, got {self.tREFI}")
        if self.tRFCpb is not None and self.tRFCpb > self.tRFC:
            raise ConfigError("tRFCpb", f"refreshing one bank cannot take longer than all "
                              f"banks (tRFC = {self.tRFC}), got {self.tRFCpb}")
        if self.tREFIpb is not None and self.tREFIpb > self.tREFI:
            raise ConfigError("tREFIpb", f"must be <= tREFI = {self.tREFI}, got "
                              f"{self.tREFIpb}")
        if self.tREFIpb is not None and (self.tPBR2PBR or self.tRRD_S) > self.tREFIpb:
            raise ConfigError("tPBR2PBR", f"per-bank refreshes are due every tREFIpb = "
                              f"{self.tREFIpb} CK and could not keep up at one per "
                              f"{self.tPBR2PBR or self.tRRD_S} CK")
        # every per-bank refresh bars all activations for tPBR2ACT: unless a row cycle
        # fits between two of them, no request ever gets its ACT (a livelock)
        pbr2act = self.tPBR2ACT or self.tRRD_S
        if self.tREFIpb is not None and pbr2act + self.tRC >= self.tREFIpb:
            raise ConfigError("tPBR2ACT", f"tPBR2ACT + tRC = {pbr2act} + {self.tRC} must "
                              f"be < tREFIpb = {self.tREFIpb} CK (no activation could "
                              "fit between per-bank refreshes)")
        # a wait longer than the time between refreshes is cut by every refresh (it
        # closes the rows), so the request behind it would never complete
        window = self.tREFI - self.tRFC
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name not in _REFRESH_TIMINGS and v is not None and v >= window:
                raise ConfigError(f.name, f"must be < tREFI - tRFC = {window} CK (a longer "
                                  f"wait is cut by every refresh), got {v}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CommandBus:
    """Command-bus occupancy of each command, in CK. ``split`` means separate row
    (ACT/PRE/REF) and column (RD/WR) command buses, as in HBM; otherwise one shared
    bus, as in DDR/LPDDR (where LPDDR5's ACT is two commands, ACT-1 and ACT-2).
    Timing constraints count from the *last* slot of a multi-slot command."""

    split: bool = param(False, doc="separate row and column command buses (HBM)")
    ACT: float = param(1.0, gt=0, le=MAX_SLOTS_CK, unit="CK", doc="slots of an activate")
    PRE: float = param(1.0, gt=0, le=MAX_SLOTS_CK, unit="CK",
                       doc="slots of a precharge (one or all banks)")
    RD: float = param(1.0, gt=0, le=MAX_SLOTS_CK, unit="CK",
                      doc="slots of a read (incl. auto-precharge)")
    WR: float = param(1.0, gt=0, le=MAX_SLOTS_CK, unit="CK",
                      doc="slots of a write (incl. auto-precharge)")
    REF: float = param(1.0, gt=0, le=MAX_SLOTS_CK, unit="CK",
                       doc="slots of a refresh (all- or per-bank)")


#: Supply rails a power section may name (DDR4/DDR5: VDD, VPP; LPDDR4: VDD1, VDD2;
#: LPDDR5/5X: VDD1, VDD2H, VDD2L; HBM: VDD, VPP). VDDQ (I/O) is not a rail here: its
#: energy is the per-bit I/O figure of :class:`Power`.
RAILS = ("VDD", "VPP", "VDD1", "VDD2", "VDD2H", "VDD2L")
_IDD = "JEDEC IDD measurement conditions (JESD79-4/-5, JESD209-4/-5, JESD235/238)"


def _current(doc: str, default: Any = dataclasses.MISSING) -> Any:
    return param(default, ge=0, le=1e5, unit="mA", doc=doc, source=_IDD)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rail:
    """Datasheet currents of one supply rail of one device (the DRAMPower inputs), mA.
    The power-down currents IDD2P/IDD3P are recorded but unused: the controller never
    enters power-down."""

    name: str = param(choices=RAILS, doc="supply rail")
    voltage: float = param(gt=0, le=5, unit="V", doc="rail voltage")
    idd0: float = _current("one bank ACT-PRE cycling at tRC")
    idd2n: float = _current("precharge standby (all banks closed)")
    idd3n: float = _current("active standby (a bank open)")
    idd4r: float = _current("burst read, continuous")
    idd4w: float = _current("burst write, continuous")
    idd5b: float = _current("all-bank refresh burst (REF every tRFC)")
    idd5pb: Optional[float] = _current("per-bank refresh burst (REFpb every tRFCpb); "
                                       "default: a REFpb costs the all-bank refresh energy "
                                       "divided by the REFpb count per tREFI", None)
    idd2p: Optional[float] = _current("precharge power-down (not modelled)", None)
    idd3p: Optional[float] = _current("active power-down (not modelled)", None)

    def _check(self):
        # every command's energy is a current above standby: with the currents in this
        # order none of them is negative (DRAMPower's inputs obey it)
        if self.idd3n < self.idd2n:
            raise ConfigError("idd3n", f"must be >= idd2n ({self.idd2n} mA: a bank open "
                              f"draws at least the closed standby), got {self.idd3n}")
        for name in ("idd0", "idd4r", "idd4w", "idd5b", "idd5pb"):
            v = getattr(self, name)
            if v is not None and v < self.idd3n:
                raise ConfigError(name, f"must be >= the active standby current (idd3n "
                                  f"{self.idd3n} mA), got {v}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Power:
    """Power parameters of one device, for :mod:`dram_models.energy` (DRAMPower's method).
    A *device* is what one set of datasheet currents describes: one x4/x8/x16 chip of a
    DDR rank, one x16 LPDDR channel die, one HBM (pseudo-)channel of one stack ID. A
    (pseudo-)channel rank holds ``channel_width_bits / device_width_bits`` devices."""

    device_width_bits: int = param(ge=1, le=4096, unit="bits", doc="data bits of one "
                                   "device", source="datasheet organization (x4/x8/x16)")
    rails: tuple[Rail, ...] = param(doc="supply rails and their currents")
    io_read_pj_per_bit: float = param(ge=0, le=100, unit="pJ/bit", doc="I/O and "
                                      "termination energy of one bit read",
                                      source="datasheet VDDQ currents or papers")
    io_write_pj_per_bit: float = param(ge=0, le=100, unit="pJ/bit", doc="I/O and "
                                       "termination energy of one bit written",
                                       source="datasheet VDDQ currents or papers")
    sources: dict[str, str] = param(default_factory=dict, doc="where the numbers come from")

    def _check(self):
        if not self.rails:
            raise ConfigError("rails", "needs at least one supply rail")
        names = [r.name for r in self.rails]
        if len(set(names)) != len(names):
            raise ConfigError("rails", f"each rail once, got {names}")


# Address-mapping names understood everywhere a mapping is asked for; any other string is
# parsed as a bit order (see dram_models.mapping).
@dataclasses.dataclass(frozen=True, kw_only=True)
class ControllerConfig:
    """Memory-controller settings (one controller per channel)."""

    mapping: str = param("RoBaRaCoCh", doc="address mapping: a named mapping or a bit-order "
                         "string, most significant field first (see dram_models.mapping)")
    read_queue: int = param(32, ge=1, le=1024, doc="read queue entries per channel (bursts)")
    write_queue: int = param(32, ge=1, le=1024, doc="write queue entries per channel (bursts)")
    write_high: float = param(0.8, gt=0, le=1, doc="start draining writes when the write "
                              "queue is this full")
    write_low: float = param(0.2, ge=0, lt=1, doc="stop draining writes at this fill")
    page_policy: Literal["open", "closed"] = param(
        "open", doc="open: rows stay open until a conflict; closed: auto-precharge when no "
        "queued request hits the row")
    refresh: Literal["all_bank", "per_bank", "none"] = param(
        "all_bank", doc="refresh mode (per_bank only where the standard has it)")
    row_hit_cap: int = param(16, ge=1, doc="column commands served to an open row before a "
                             "waiting conflicting request may close it (starvation cap)")

    def _check(self):
        if self.write_low >= self.write_high:
            raise ConfigError("write_low", f"must be < write_high ({self.write_high}), got "
                              f"{self.write_low}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class DramSpec:
    """One DRAM standard/configuration (see module docstring)."""

    name: str = param(doc="standard name, e.g. LPDDR5-6400")
    family: Family = param(doc="command set and timing-rule family")
    tCK_ps: float = param(ge=1.0, le=1e6, unit="ps", doc="command clock (CK) period")
    data_rate_mtps: float = param(ge=1.0, le=1e6, unit="MT/s", doc="data rate per pin")
    organization: Organization = param(doc="organization")
    timing: Timing = param(doc="timing parameters")
    command_bus: CommandBus = param(default_factory=CommandBus, doc="command-bus occupancy")
    controller: ControllerConfig = param(default_factory=ControllerConfig,
                                         doc="default controller settings")
    power: Optional[Power] = param(None, doc="device currents and I/O energy (no energy "
                                   "report without them)")
    per_bank_refresh: bool = param(False, doc="the standard has per-bank refresh")
    description: str = param("", doc="free text")
    sources: dict[str, str] = param(default_factory=dict, doc="where the numbers come from")

    def _check(self):
        beats_per_ck = self.data_rate_mtps * self.tCK_ps * 1e-6
        bl = self.organization.burst_length / beats_per_ck
        if bl > MAX_TIMING_CK:
            raise ConfigError("data_rate_mtps", f"a burst would last {bl:.3g} CK (more than "
                              f"{MAX_TIMING_CK}) at {self.data_rate_mtps:g} MT/s and tCK "
                              f"{self.tCK_ps:g} ps")
        window = self.timing.tREFI - self.timing.tRFC
        if bl >= window:
            raise ConfigError("data_rate_mtps", f"a burst would last {bl:.3g} CK, longer "
                              f"than tREFI - tRFC = {window} CK between refreshes")
        if abs(bl - round(bl)) > 1e-6 or round(bl) < 1:
            raise ConfigError("organization.burst_length",
                              f"a burst of {self.organization.burst_length} beats lasts "
                              f"{bl:g} CK at {self.data_rate_mtps:g} MT/s and tCK "
                              f"{self.tCK_ps:g} ps; it must be a whole number of CK")
        t = self.timing
        if t.tRTW < t.tCL + round(bl) - t.tCWL:
            raise ConfigError("timing.tRTW", f"must be >= tCL + burst - tCWL = "
                              f"{t.tCL + round(bl) - t.tCWL} CK (the read's data must leave "
                              f"the bus before the write's arrives), got {t.tRTW}")
        self.ticks_per_ck                      # raises unless the slots fit a tick grid
        if self.power and self.organization.channel_width_bits % self.power.device_width_bits:
            raise ConfigError("power.device_width_bits", f"must divide channel_width_bits "
                              f"({self.organization.channel_width_bits}), got "
                              f"{self.power.device_width_bits}")
        if self.controller.refresh == "per_bank" and not self.per_bank_refresh:
            raise ConfigError("controller.refresh", f"{self.name} has no per-bank refresh; "
                              "use all_bank or none")
        if self.family.startswith("hbm") and not self.command_bus.split:
            raise ConfigError("command_bus.split", "HBM has separate row and column "
                              "command buses; set split: true")

    # ---- derived quantities -------------------------------------------------------
    @property
    def tBL(self) -> int:
        """Data-bus occupancy of one burst, CK."""
        beats_per_ck = self.data_rate_mtps * self.tCK_ps * 1e-6
        return int(round(self.organization.burst_length / beats_per_ck))

    @property
    def ticks_per_ck(self) -> int:
        """Engine ticks per CK: the smallest of 1, 2, 4, 8 that makes every command-bus
        occupancy a whole number of ticks."""
        slots = [getattr(self.command_bus, c) for c in ("ACT", "PRE", "RD", "WR", "REF")]
        for k in (1, 2, 4, 8):
            if all(abs(s * k - round(s * k)) < 1e-9 for s in slots):
                return k
        raise ConfigError("command_bus", "command slots must be multiples of 1/8 CK")

    @property
    def burst_bytes(self) -> int:
        return self.organization.burst_bytes

    @property
    def peak_gbps(self) -> float:
        """Theoretical peak data bandwidth of the whole configuration, GB/s."""
        o = self.organization
        return (self.data_rate_mtps * 1e6 * o.channel_width_bits / 8 * o.pseudo_channels
                * o.channels / 1e9)

    @property
    def tck_ns(self) -> float:
        return self.tCK_ps / 1000.0

    def idle_read_latency_ck(self) -> float:
        """Latency of an isolated read to a closed bank, CK: ACT's slots up to its last,
        tRCD, read latency and one burst (the documented timing sum). Timings count from
        the last slot of each command, so a multi-slot RD's extra slots fall inside tRCD."""
        return (self.command_bus.ACT - 1) + self.timing.tRCD + self.timing.tCL + self.tBL

    def row_hit_latency_ck(self) -> float:
        """Latency of an isolated read to an open row, CK: RD's slots up to its last, tCL
        and one burst."""
        return max(self.command_bus.RD - 1, 0) + self.timing.tCL + self.tBL

    def with_channels(self, channels: int) -> "DramSpec":
        return override(self, {"organization": {"channels": channels}})


def list_standards() -> list[str]:
    """Names of the bundled presets (lower case, e.g. ``lpddr5-6400``)."""
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def preset_file(name: str, folder: Path, key: str, what: str, lower: bool = False) -> dict:
    """Raw mapping of the bundled preset ``name`` (a ``.yaml`` file in ``folder``; names
    lower-cased first with ``lower``) or of a YAML file path. One-line errors naming
    ``key``: a missing file, an unknown preset (with the closest names and the list of
    ``what`` presets), a file that is not a mapping."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml"):
        if not path.exists():
            raise ConfigError(key, f"no such file: {name}")
        data = _parsed(path)
    else:
        names = sorted(p.stem for p in folder.glob("*.yaml"))
        stem = name.lower() if lower else name
        if stem not in names:
            raise ConfigError(key, f"unknown {what} '{name}'" + suggest(name, names)
                              + f"; available: {', '.join(names)} (or a path to a .yaml "
                              "file)")
        data = _parsed(folder / f"{stem}.yaml")
    if not isinstance(data, dict):
        raise ConfigError(key, f"{what} file {name} must hold a mapping")
    return data


#: parsed preset files by (path, modification time, size): a search or sweep loads the
#: same few presets for every design, and parsing one costs ~20 ms
_PARSED: dict[tuple[str, int, int], Any] = {}


def _parsed(path: Path) -> Any:
    """The parsed YAML of ``path``, a private copy (callers may change it), parsed once
    while the file stays the same."""
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        return yamlio.load_file(path)   # the reader reports why it cannot be read
    if key not in _PARSED:
        if len(_PARSED) > 256:
            _PARSED.clear()
        _PARSED[key] = yamlio.load_file(path)
    return copy.deepcopy(_PARSED[key])


def preset_data(name: str, key: str = "standard") -> dict:
    """Raw data of preset ``name`` (case-insensitive) or of a YAML file path."""
    return preset_file(name, PRESET_DIR, key, "DRAM standard", lower=True)


def load_standard(spec: str | dict | DramSpec, overrides: dict | None = None,
                  key: str = "standard") -> DramSpec:
    """Load a DRAM standard: a preset name, a YAML path, or a mapping. A mapping may name
    a ``preset`` to start from and override any of its fields. ``overrides`` (a nested
    mapping) is merged last. Errors name the key path under ``key``."""
    if isinstance(spec, DramSpec):
        data = to_dict(spec)
    elif isinstance(spec, str):
        data = preset_data(spec, key)
    elif isinstance(spec, dict):
        data = dict(spec)
        if "preset" in data:
            base = data.pop("preset")
            if not isinstance(base, str):
                raise ConfigError(f"{key}.preset", "must be a preset name or path")
            data = deep_merge(preset_data(base, f"{key}.preset"), data)
    else:
        raise ConfigError(key, f"must be a preset name or a mapping, got {spec!r}")
    if overrides:
        data = deep_merge(data, overrides)
    return load(DramSpec, data, key)


def override(spec: DramSpec, changes: dict) -> DramSpec:
    """A copy of ``spec`` with nested ``changes`` applied (validated)."""
    return load(DramSpec, deep_merge(to_dict(spec), changes), spec.name)


def ceil_ticks(ck: float, ticks_per_ck: int) -> int:
    return int(math.ceil(ck * ticks_per_ck - 1e-9))
