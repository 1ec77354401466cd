"""Sweep hinge designs of the four-panel fold in one vmapped batch.

256 designs (stiffness K and damping c drawn uniformly) are simulated together for 10 s;
each member is reduced to its time to reach flat (all hinges within 1 degree), peak hub
rate, constraint violation and energy drift. Prints the best designs, writes the table to
out/sweep_fold_designs.csv and a scatter plot to out/sweep_fold_designs.png.

    python examples/sweep_fold_designs.py [--batch 256] [--devices all]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from diffmb.batch import member_values, scenario_batch, sweep  # noqa: E402
from diffmb.scenarios import get  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--batch", type=int, default=256)
ap.add_argument("--devices", default=None)
args = ap.parse_args()

members = member_values({"K": (0.02, 0.3), "c": (0.0, 0.1)}, {}, args.batch, sample="random", seed=1)
system, params = scenario_batch(get("fold-4panel"), members)
res = sweep(system, params, t1=10.0, dt=1e-3, members=members, devices=args.devices, progress=True)
print(f"{res.batch} designs x 10 s in {res.wall_s:.2f} s (+{res.compile_s:.1f} s compile): "
      f"{res.throughput:.0f} simulated s per wall s on {res.devices} device(s)")
rows = res.rows()
flat = [r for r in rows if np.isfinite(r["time_to_flat"])]
print(f"{len(flat)} of {len(rows)} designs reach flat within 10 s; fastest:")
for r in sorted(flat, key=lambda r: r["time_to_flat"])[:5]:
    print(f"  K={r['K']:.3f} c={r['c']:.3f}: flat at {r['time_to_flat']:.2f} s, peak hub rate "
          f"{r['peak_hub_rate']:.2e} rad/s")

out = Path("out")
out.mkdir(exist_ok=True)
res.write_csv(out / "sweep_fold_designs.csv")
K, c = np.array([r["K"] for r in rows]), np.array([r["c"] for r in rows])
t = np.array([r["time_to_flat"] for r in rows])
fig, ax = plt.subplots(figsize=(6, 4.5))
ax.scatter(K[~np.isfinite(t)], c[~np.isfinite(t)], c="lightgray", s=12, label="not flat in 10 s")
sc = ax.scatter(K[np.isfinite(t)], c[np.isfinite(t)], c=t[np.isfinite(t)], s=14, cmap="viridis")
fig.colorbar(sc, label="time to flat [s]")
ax.set(xlabel="hinge stiffness K [N m/rad]", ylabel="hinge damping c [N m s/rad]")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out / "sweep_fold_designs.png", dpi=120)
print("saved out/sweep_fold_designs.csv and out/sweep_fold_designs.png")
