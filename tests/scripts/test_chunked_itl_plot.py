"""scripts/serving_chunked_itl.py's figure: the loads' panels share their axes, and a
log ITL axis spanning a couple of decades gets enough labelled ticks to be read."""
from __future__ import annotations

import numpy as np

from scriptmod import load_script


def _pair(lo_s: float, hi_s: float) -> dict:
    """Both loops at one load, with ITLs spread over [lo_s, hi_s] seconds."""
    itl = np.geomspace(lo_s, hi_s, 50)
    count = np.ones_like(itl)
    return {name: ({"itl_p99_s": float(hi_s)}, itl, count, 0.0)
            for name in ("whole", "chunked")}


def test_panels_share_axes_and_label_enough_ticks(tmp_path):
    import matplotlib.pyplot as plt
    script = load_script("serving_chunked_itl")
    runs = {"trace arrivals": _pair(0.012, 0.6), "Poisson 10 req/s": _pair(0.012, 1.6),
            "Poisson 40 req/s": _pair(0.02, 2.9)}
    script.plot(tmp_path / "itl.png", runs)
    fig = plt.gcf()
    try:
        fig.canvas.draw()
        axes = fig.axes
        assert len(axes) == 3 and (tmp_path / "itl.png").stat().st_size > 0
        assert len({ax.get_xlim() for ax in axes}) == 1
        assert len({ax.get_ylim() for ax in axes}) == 1
        lo, hi = axes[0].get_xlim()
        for ax in axes:
            shown = [t for t, v in zip(ax.get_xticklabels(), ax.get_xticks())
                     if lo <= v <= hi and t.get_text()]
            assert len(shown) >= 5, [t.get_text() for t in shown]
    finally:
        plt.close(fig)
