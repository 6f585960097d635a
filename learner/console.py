"""The learner's console lines: one function per kind of line, each reading figures the learner already keeps.

docs/configuration.md explains how to read them.
"""

from __future__ import annotations

from learner.data_plane import DataPlaneStats
from shared.envs import EnvEntry


def format_eval_line(result: dict) -> str:
    """The [MAIN] line of an evaluation during training."""
    s, r = result["summary"], result.get("random")
    random = "" if r is None else f"; random policy: score mean {r['score_mean']:,.2f}, return {r['return_mean']:.2f}"
    return (
        f"[MAIN] Eval at {result['env_steps']:,} env steps (weights v{result['weights_version']}, "
        f"eps {result['epsilon']:g}, {s['episodes']} episodes): score mean {s['score_mean']:,.2f}, "
        f"median {s['score_median']:,.1f}, max {s['score_max']:,.1f}, success {s['success_rate']:.0%}, "
        f"return {s['return_mean']:.2f}, length {s['length_mean']:.0f}{random}; took {result['seconds']:.1f}s"
    )


def format_epoch_line(epoch: int, f: dict[str, float], env: EnvEntry) -> str:
    """The seed's [MAIN] line plus throughput, what set the pace (Learner waiting: no experience to train on; Actors held:
    intake held back for the ratio) and RSS; reward, score and success: means over the last 100 episodes begun at the
    true start, named by the env; then those begun at saved states, when there are any."""
    score, success = env.score.capitalize(), env.success.capitalize()
    return (
        f"[MAIN] Epoch {epoch} - Loss: {f['learner/loss']:.4f}, TD Error: {f['learner/td_error']:.4f}, "
        f"Reward: {f['actor/return']:.2f}, {score}: {f['actor/score']:.1f}, {success}: {f['actor/success_rate']:.0%}, "
        f"Epsilon: {f['actor/epsilon']:.3f}, Buffer: {int(f['replay/size']):,}, "
        f"Updates/s: {f['learner/updates_per_s']:.2f}, Samples/s: {f['learner/samples_per_s']:,.0f}, "
        f"Experiences/s: {f['actor/experiences_per_s']:,.1f}, Replay ratio: {f['learner/replay_ratio']:.2f}, "
        f"Learner waiting: {f['learner/starved_share']:.0%}, Actors held: {f['learner/holding_share']:.0%}, "
        f"Weights: v{int(f['learner/weights_version'])} (max lag {int(f['actor/weights_lag_max'])}"
        f"{other_run_phrase(int(f.get('actor/other_run', 0)))}), RSS: {f['learner/rss_mb']:,.0f} MB"
        f"{starts_phrase(f, score, success)}"
    )


def starts_phrase(f: dict[str, float], score: str, success: str) -> str:
    """The share of episodes begun at saved states and their own score (the line's score is the true starts'); empty
    when every episode began at the true start."""
    hazard, frontier = int(f.get("actor/starts_hazard", 0)), int(f.get("actor/starts_frontier", 0))
    if not hazard + frontier:
        return ""
    total = max(int(f["actor/episodes"]), 1)
    return (
        f", Starts: {(hazard + frontier) / total:.0%} saved ({hazard / total:.0%} hazard, {frontier / total:.0%} frontier; "
        f"{score} {f['actor/started_score']:.1f}, {success} {f['actor/started_success_rate']:.0%})"
    )


def other_run_phrase(actors: int) -> str:
    """Actors whose latest batch another run's weights played (a learner that started over), if any."""
    return f"; {actors} actor(s) still on another run's weights" if actors else ""


def format_processor_line(s: DataPlaneStats, rate: float) -> str:
    """The seed's console line, plus rejects and the arrival rate."""
    return (
        f"[PROCESSOR] Processed: {s.processed:,}, Batches: {s.batches:,}, Drops: {s.drops:,}, "
        f"Lost in flight: {s.lost_in_flight:,}, Buffer: {s.buffer:,}, Consolidated Queue: {s.queued:,}, "
        f"Rejected: {s.rejected:,}, Rate: {rate:,.0f}/s, Per actor: {s.per_actor}"
    )


def format_duration(seconds: float) -> str:
    """``42s``, ``7m05s`` or ``3h02m``: a remaining time at a glance."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
