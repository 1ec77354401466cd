"""Tune the Baumgarte gains of the four-panel origami fold (Fulton & Schaub sec. 4.2).

The paper hand-tuned a = 100, b = 0. Here Adam descends the time-integrated squared
constraint violation of a 10 s RK4 run, gradients through the whole simulation.
Prints the gains it found and saves the loss history to out/tune_baumgarte.png.

    python examples/tune_baumgarte.py [--t1 10] [--steps 30]
"""

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from diffmb.design.tune import tune

ap = argparse.ArgumentParser()
ap.add_argument("--t1", type=float, default=10.0)
ap.add_argument("--steps", type=int, default=30)
args = ap.parse_args()

res = tune("fold-4panel", ["a", "b"], t1=args.t1, iterations=args.steps, learning_rate=0.3,
           callback=lambda i, loss, p: print(f"{i:3d}  loss {loss:.3e}  a={p['a']:.4g}  b={p['b']:.4g}"))
print(f"paper gains {res.initial}: loss {res.initial_loss:.3e}")
print(f"tuned gains {res.best}: loss {res.best_loss:.3e} ({res.initial_loss / res.best_loss:.1f}x lower)")

out = Path("out")
out.mkdir(exist_ok=True)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
ax1.semilogy([h["loss"] for h in res.history], "o-")
ax1.axhline(res.initial_loss, color="k", ls="--", label="paper a=100, b=0")
ax1.set(xlabel="iteration", ylabel="violation integral", title="loss")
ax1.legend()
ax2.plot([h["params"]["a"] for h in res.history], [h["params"]["b"] for h in res.history], "o-")
ax2.set(xlabel="a [1/s]", ylabel="b [1/s]", title="gains")
fig.tight_layout()
fig.savefig(out / "tune_baumgarte.png", dpi=120)
print("saved out/tune_baumgarte.png")
