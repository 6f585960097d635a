"""What the learner keeps of its in-training evaluations: the metrics row, the best snapshots (the final
evaluation's candidates) and best.pt."""

from __future__ import annotations

import contextlib
import os

import torch

from learner.checkpoint import best_score, load_best, load_snapshots, save_best, save_snapshot, snapshot_path
from shared.writes import RefusedWrites

EVAL_FIGURES = {"score": "score_mean", "score_median": "score_median", "score_max": "score_max", "return": "return_mean"}
EVAL_FIGURES |= {"success_rate": "success_rate", "length": "length_mean", "episodes": "episodes"}  # metric -> summary key


def eval_figures(result: dict) -> dict[str, float]:
    """The metrics row of an evaluation result (actors/eval_actor.py ``eval_process_main``)."""
    figures = {f"eval/{name}": result["summary"][key] for name, key in EVAL_FIGURES.items()}
    figures |= {f"eval/{key}": result[key] for key in ("epsilon", "weights_version", "seconds")}
    if result.get("random") is not None:  # envs with random_reference: a random policy on the same seeds
        figures |= {"eval/random_score": result["random"]["score_mean"], "eval/random_return": result["random"]["return_mean"]}
    return figures


class SnapshotKeeper:
    """The ``keep`` best-scoring evaluated weights in snapshots/ and the best in best.pt (on resume, the run folder's)."""

    def __init__(self, run_dir: str, keep: int, resumed: bool, refused: RefusedWrites):
        """``refused``: where a write the disk refuses is said and counted (the weights are then not kept)."""
        self.run_dir, self.keep, self.refused = run_dir, keep, refused
        best = load_best(run_dir) if resumed else None
        self.best: tuple[float, float] | None = best_score(best["eval"]) if best and "eval" in best else None
        # (in-training score, weights_version) of the kept snapshots, best first
        self.snapshots: list[tuple[tuple[float, float], int]] = [
            (best_score(st["eval"]), int(st["counters"]["weights_version"]))
            for st in (load_snapshots(run_dir) if resumed else [])
        ]

    def consider(self, result: dict, state: dict, config_json: str) -> None:
        """Keep the evaluated weights ``state`` (numpy arrays) as a snapshot and as best.pt where they score high enough."""
        s, version = result["summary"], result["weights_version"]
        snapshot = {
            "learner": {"online": {k: torch.as_tensor(v) for k, v in state.items()}},  # no copy: ours already
            "counters": {
                "updates": result["updates"],
                "inserted": result["env_steps"],
                "weights_version": version,
                "wall_seconds": result["wall_seconds"],
            },
            "eval": {k: s[k] for k in ("score_mean", "score_median", "score_max", "success_rate", "return_mean", "episodes")}
            | {"epsilon": result["epsilon"]},
            "config": config_json,
        }
        score, keep = best_score(s), self.keep
        kept = any(v == version for _, v in self.snapshots)  # the same weights evaluated twice: one file
        candidate = keep and not kept and (len(self.snapshots) < keep or score > self.snapshots[-1][0])
        if candidate and self.refused.attempt(f"snapshot v{version}", save_snapshot, self.run_dir, snapshot):
            self.snapshots = sorted(self.snapshots + [(score, version)], reverse=True)
            for _, dropped in self.snapshots[keep:]:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(snapshot_path(self.run_dir, dropped))
            del self.snapshots[keep:]
        if (self.best is None or score > self.best) and self.refused.attempt("best.pt", save_best, self.run_dir, snapshot):
            self.best = score
            what = f"success {s['success_rate']:.0%}, score mean {s['score_mean']:,.2f}"
            path = os.path.join(self.run_dir, "best.pt")
            self.refused.echo(f"[MAIN] best evaluation so far ({what}): weights v{version} saved to {path}")
