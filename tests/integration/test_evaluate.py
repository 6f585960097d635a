"""launch.evaluate / shared.evaluation.episodes: a tiny Catch run folder end to end, a Mario video, bad input, and Snake and
fuel breaks played greedy and at random."""

import json
import os

import numpy as np
import pytest
import torch

from launch.evaluate import main, video_episode
from learner.checkpoint import save_best, save_checkpoint
from shared.config import EnvConfig, RunConfig
from shared.envs import action_names
from shared.envs.fuelbreak import FuelbreakOptions
from shared.envs.mario import MarioOptions
from shared.envs.snake import SnakeOptions
from shared.evaluation.episodes import Episode, build_network, play_episodes, ranked_episode, summarize

# Mario tests play no secondary rows (they are tested in tests/integration/test_eval_rows.py)
NO_ROWS = ("--low-epsilon-episodes", "0", "--noop-episodes", "0")


def make_run(folder, name="catch", frame_size=42, updates=7, inserted=1234) -> RunConfig:
    """A run folder as launch.local leaves it: config.json and a checkpoint of a fresh network."""
    os.makedirs(folder, exist_ok=True)
    cfg = RunConfig()
    cfg.env.name = name
    cfg.env.frame_size = frame_size
    with open(os.path.join(folder, "config.json"), "w") as fh:
        fh.write(cfg.to_json())
    torch.manual_seed(0)
    net = build_network(cfg.env)
    save_checkpoint(
        str(folder),
        {
            "learner": {"online": net.state_dict(), "target": net.state_dict(), "updates": updates},
            "counters": {
                "epoch": 1,
                "updates": updates,
                "weights_version": 1,
                "samples_trained": 0,
                "inserted": inserted,
                "wall_seconds": 3.5,
            },
            "config": cfg.to_json(),
        },
    )
    return cfg


def test_catch_run_json(tmp_path, capsys):
    run = tmp_path / "run"
    make_run(run)
    assert main([str(run), "--episodes", "12", "--epsilon", "0.2", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "score mean" in out and "greedy (eps 0)" in out and "actions eps 0.2:" in out
    path = run / "eval-catch-eps0.2.json"
    data = json.loads(path.read_text())
    for key in (
        "run_dir",
        "checkpoint",
        "updates",
        "env_steps",
        "stage",
        "epsilon",
        "policy",
        "seed",
        "summary",
        "greedy",
        "episodes",
    ):
        assert key in data, key
    assert data["updates"] == 7 and data["env_steps"] == 1234
    assert data["epsilon"] == 0.2 and data["policy"] == "greedy" and data["seed"] == 3
    assert data["checkpoint"] == str(run / "checkpoint.pt")
    s = data["summary"]
    assert s["episodes"] == 12 == len(data["episodes"])
    assert 0.0 <= s["success_rate"] <= 1.0
    assert s["successes"] == sum(e["success"] for e in data["episodes"])
    assert sum(s["action_counts"].values()) == s["steps"] == sum(e["length"] for e in data["episodes"])
    assert list(s["action_counts"]) == ["left", "stay", "right"]
    assert sum(s["action_fractions"].values()) == pytest.approx(1.0)
    assert s["score_max"] == max(e["score"] for e in data["episodes"])
    assert {e["score"] for e in data["episodes"]} <= {-1.0, 1.0}  # Catch scores its return
    assert all(e["success"] == (e["score"] == 1.0) for e in data["episodes"])
    assert s["return_mean"] == pytest.approx(np.mean([e["return"] for e in data["episodes"]]))
    g = data["greedy"]
    assert g["episodes"] == 1 and sum(g["action_counts"].values()) == g["steps"] == g["episode"]["length"]


def test_checkpoint_option_and_json_path(tmp_path):
    run = tmp_path / "run"
    make_run(run)
    copy = tmp_path / "elsewhere" / "copy.pt"
    copy.parent.mkdir()
    copy.write_bytes((run / "checkpoint.pt").read_bytes())
    out = tmp_path / "out" / "e.json"
    # no RUN_DIR: the config comes from inside the checkpoint
    assert main(["--checkpoint", str(copy), "--episodes", "2", "--epsilon", "0", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["checkpoint"] == str(copy) and data["run_dir"] is None
    assert data["env"]["name"] == "catch" and data["summary"]["episodes"] == 2


def test_run_folder_plays_best_pt_unless_told_otherwise(tmp_path):
    run = tmp_path / "run"
    make_run(run, updates=7, inserted=1234)
    assert main([str(run), "--episodes", "1", "--json", str(tmp_path / "no-best.json")]) == 0
    played = json.loads((tmp_path / "no-best.json").read_text())  # no best.pt yet: the last checkpoint
    assert played["net"] == "online" and played["checkpoint"] == str(run / "checkpoint.pt")
    state = torch.load(run / "checkpoint.pt", weights_only=True)
    state["counters"] = {**state["counters"], "updates": 3, "inserted": 555}
    save_best(str(run), state)
    assert main([str(run), "--episodes", "1", "--json", str(tmp_path / "auto.json")]) == 0
    played = json.loads((tmp_path / "auto.json").read_text())
    assert played["net"] == "best" and played["checkpoint"] == str(run / "best.pt")
    assert played["updates"] == 3 and played["env_steps"] == 555
    assert main([str(run), "--episodes", "1", "--net", "online", "--json", str(tmp_path / "last.json")]) == 0
    played = json.loads((tmp_path / "last.json").read_text())
    assert played["net"] == "online" and played["updates"] == 7 and played["env_steps"] == 1234
    # an explicit checkpoint file is played as it is, even beside a best.pt
    assert main(["--checkpoint", str(run / "checkpoint.pt"), "--episodes", "1", "--json", str(tmp_path / "f.json")]) == 0
    assert json.loads((tmp_path / "f.json").read_text())["checkpoint"] == str(run / "checkpoint.pt")


def test_play_episodes_policies():
    cfg = EnvConfig(name="catch", frame_size=42)
    net = build_network(cfg)
    a = play_episodes(net, cfg, 5, 0.3, seed=1)
    b = play_episodes(net, cfg, 5, 0.3, seed=1)
    assert [e.actions.tolist() for e in a] == [e.actions.tolist() for e in b]  # seeded
    for e in a:
        assert e.actions.dtype == np.uint8 and len(e.actions) == e.length == 9
    greedy = play_episodes(net, cfg, 3, 0.0, seed=2)
    rand = play_episodes(None, cfg, 20, 0.0, seed=2, policy="random")
    assert {int(x) for e in rand for x in e.actions} == {0, 1, 2}
    s = summarize(greedy + rand, 3, action_names(cfg))
    assert s["episodes"] == 23 and sum(s["action_counts"].values()) == s["steps"] == 23 * 9
    with pytest.raises(ValueError, match="greedy"):
        play_episodes(None, cfg, 1, 0.0, seed=0)


def test_ranked_episodes_and_names():
    eps = [
        Episode(10, False, 1.0, 3, np.zeros(3, np.uint8)),
        Episode(20, False, 5.0, 3, np.zeros(3, np.uint8)),
        Episode(20, True, 9.0, 4, np.zeros(4, np.uint8)),
        Episode(10, False, 0.5, 2, np.zeros(2, np.uint8)),
    ]
    assert ranked_episode(eps) == 2 and ranked_episode(eps, "worst") == 3
    with pytest.raises(ValueError, match="'middle'"):
        ranked_episode(eps, "middle")
    greedy = Episode(30, True, 12.0, 5, np.zeros(5, np.uint8))
    assert video_episode(eps, greedy, "greedy") == ("greedy", greedy)
    assert video_episode(eps, None, "greedy") == (2, eps[2])  # a random policy has no greedy episode: the best
    assert video_episode(eps, greedy, "worst") == (3, eps[3]) and video_episode(eps, greedy, "1") == (1, eps[1])
    right_only = EnvConfig(options={"mario": MarioOptions(actions="right_only")})
    assert action_names(right_only) == ["NOOP", "right", "right+A", "right+B", "right+A+B"]


@pytest.mark.parametrize(
    "args, needle",
    [
        (["{missing}"], "{missing}"),
        (["{empty}"], "checkpoint.pt"),
        (["--policy", "random", "--env.mario.stage", "9-9"], "env.mario.stage='9-9'"),
        (["--policy", "random", "--env.mario.stage", "one"], "'one'"),
        (["{run}", "--env.mario.stage", "1-2"], "--env.mario.stage is an option of env mario"),  # the run plays catch
        (["{run}", "--env.frame-size", "84"], "does not fit the network of env catch"),  # trained at 42
        (["{run}", "--episodes", "0"], "--episodes=0"),
        (["{run}", "--epsilon", "1.5"], "--epsilon=1.5"),
        (["{run}", "--epsilon", "-0.1"], "--epsilon=-0.1"),
        (["{run}", "--policy", "smart"], "'smart'"),
        (["{run}", "--checkpoint", "{missing}"], "{missing}"),
        (["{run}", "--video", "{tmp}/v.avi"], "v.avi"),
        (["{run}", "--video", "{tmp}/v.mp4"], "catch"),  # video needs Mario
        (["{run}", "--video", "{tmp}/v.mp4", "--video-episode", "last"], "--video-episode='last'"),
        (["{run}", "--video", "{tmp}/v.mp4", "--episodes", "3", "--video-episode", "3"], "--video-episode='3'"),  # 0..2
        (["{run}", "--video", "{tmp}/v.mp4", "--video-episode", "\u00b2"], "--video-episode='\u00b2'"),  # not ASCII
        (["{run}", "--video-episode", "worst"], "--video-episode='worst'"),  # nothing to film without --video
        (["--episodes", "2"], "RUN_DIR"),
        (["--policy", "random", "--env.name", "chess"], "env.name='chess'"),
        (["{run}", "--episodes", "many"], "'many'"),
        (["--policy", "constant", "--env.name", "catch"], "--action=None"),  # constant needs an action
        (["--policy", "random", "--action", "left"], "--action='left'"),  # ... and only constant takes one
        (["--policy", "constant", "--action", "jump", "--env.name", "catch"], "--action='jump'"),
        (["--policy", "random", "--env.mario.actions", "left_only"], "'left_only'"),
        (["--policy", "constant", "--action", "left", "--env.mario.actions", "right_only"], "--action='left'"),  # not in the set
        (["--policy", "random", "--env.name", "catch", "--env.mario.actions", "right_only"], "--env.mario.actions is an"),
        (["--policy", "random", "--env.name", "catch", "--env.mario.no-jump-release"], "--env.mario.no-jump-release is an"),
        # evaluate's own spellings of env options: each names launch.local's
        (["{run}", "--stage", "1-2"], "--stage is now --env.mario.stage"),
        (["--policy", "random", "--buttons", "right_only"], "--buttons is now --env.mario.actions"),
        (["--policy", "random", "--jump-release", "off"], "--jump-release is now --env.mario.jump-release"),
        (["{run}", "--max-episode-steps", "9"], "--max-episode-steps is now --env.max-episode-steps"),
        (["--policy", "random", "--env=catch"], "--env is now --env.name"),
        (["--policy", "random", "--env-module", "my.envs"], "--env-module is now --env.module"),
    ],
)
def test_bad_input(tmp_path, capsys, args, needle):
    run, empty = tmp_path / "run", tmp_path / "empty"
    make_run(run)
    empty.mkdir()
    (empty / "config.json").write_text((run / "config.json").read_text())
    subst = {"missing": str(tmp_path / "nope"), "empty": str(empty), "run": str(run), "tmp": str(tmp_path)}
    argv = [a.format(**subst) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    assert needle.format(**subst) in err
    assert not list(run.glob("eval-*.json"))


def test_constant_policy_holds_its_action_but_where_epsilon_explores(tmp_path):
    out = tmp_path / "right.json"
    assert (
        main(
            [
                "--policy",
                "constant",
                "--action",
                "right",
                "--env.name",
                "catch",
                "--episodes",
                "20",
                "--epsilon",
                "0",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert (data["policy"], data["action"], data["epsilon"], data["net"]) == ("constant", "right", 0.0, None)
    assert data["summary"]["action_fractions"]["right"] == 1.0
    assert (
        main(
            [
                "--policy",
                "constant",
                "--action",
                "right",
                "--env.name",
                "catch",
                "--episodes",
                "50",
                "--epsilon",
                "0.5",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    fractions = json.loads(out.read_text())["summary"]["action_fractions"]
    assert 0.5 < fractions["right"] < 1.0 and fractions["left"] > 0  # half the steps random over 3 actions


@pytest.mark.slow
def test_mario_random_video(tmp_path):
    pytest.importorskip("gym_super_mario_bros")
    imageio = pytest.importorskip("imageio.v2")
    video, out = tmp_path / "second.mp4", tmp_path / "random.json"
    assert (
        main(
            [
                "--policy",
                "random",
                "--episodes",
                "2",
                "--env.mario.stage",
                "1-1",
                "--env.max-episode-steps",
                "120",
                "--video",
                str(video),
                "--video-episode",
                "1",
                "--json",
                str(out),
                *NO_ROWS,
            ]
        )
        == 0
    )
    data = json.loads(out.read_text())
    assert data["policy"] == "random" and data["greedy"] is None and data["stage"] == "1-1"
    ep = data["episodes"][1]
    v = data["video"]
    assert v["episode"] == 1 and v["score"] == ep["score"] > 0  # the replay reached the episode's score (x_pos)
    assert 1 + 4 * (ep["length"] - 1) < v["frames"] <= 1 + 4 * ep["length"]  # every emulator frame + reset screen
    assert v["seconds"] == pytest.approx(v["frames"] / 60) and v["bytes"] == video.stat().st_size
    assert video.read_bytes()[4:8] == b"ftyp"  # an MP4 (ISO base media) container
    reader = imageio.get_reader(str(video), format="FFMPEG")
    try:
        assert reader.get_meta_data()["codec"] == "h264"
        count = 0
        for frame in reader:
            assert frame.shape == (240, 256, 3)
            count += 1
    finally:
        reader.close()
    assert count == v["frames"]


@pytest.mark.slow
def test_mario_baselines_play_the_buttons_asked_for(tmp_path):
    pytest.importorskip("gym_super_mario_bros")
    out = tmp_path / "b.json"
    common = ["--episodes", "1", "--epsilon", "1", "--env.max-episode-steps", "200", "--json", str(out), *NO_ROWS]
    baseline = ["--policy", "constant", "--action", "right+B", "--env.mario.actions", "right_only", "--env.mario.no-jump-release"]
    assert main([*baseline, *common]) == 0
    data = json.loads(out.read_text())
    assert data["env"]["mario"]["actions"] == "right_only" and data["env"]["mario"]["jump_release"] is False
    assert sorted(data["summary"]["action_fractions"]) == sorted(["NOOP", "right", "right+A", "right+B", "right+A+B"])
    assert main(["--policy", "random", *common]) == 0  # without --env.mario.actions: the default set, 7 buttons
    data = json.loads(out.read_text())
    assert data["env"]["mario"]["actions"] == "simple" and len(data["summary"]["action_fractions"]) == 7


@pytest.mark.slow
def test_gif_every_fourth_frame(tmp_path):
    pytest.importorskip("gym_super_mario_bros")
    from PIL import Image

    from shared.evaluation.video import record_video

    cfg = EnvConfig()
    actions = np.full(15, 4, np.uint8)  # right+A+B: Mario runs right from the start
    info = record_video(cfg, actions, str(tmp_path / "a.gif"))
    assert info.emulator_frames == 1 + 15 * 4 and info.frames == 16 and info.score > 40
    assert info.seconds == pytest.approx(info.emulator_frames / 60, abs=0.07)
    with Image.open(tmp_path / "a.gif") as im:
        assert im.size == (256, 240) and 1 < im.n_frames <= info.frames
    again = record_video(cfg, actions, str(tmp_path / "b.mp4"), expected_score=info.score)
    assert again.frames == info.emulator_frames and again.score == info.score
    with pytest.raises(RuntimeError, match="replay reached score"):
        record_video(cfg, actions, str(tmp_path / "c.mp4"), expected_score=info.score + 1)


@pytest.mark.slow
def test_the_final_evaluation_films_a_greedy_episode_and_says_a_failure_without_raising(tmp_path):
    pytest.importorskip("gym_super_mario_bros")
    from launch.final_eval import film_greedy
    from shared.evaluation.video import record_video

    cfg, actions = EnvConfig(), [4] * 15  # right+A+B from the start
    score = record_video(cfg, actions, str(tmp_path / "reference.mp4")).score
    lines: list[str] = []
    film_greedy(cfg, actions, score, str(tmp_path / "best.mp4"), "best.pt", lines.append)
    assert (tmp_path / "best.mp4").stat().st_size > 0
    assert lines == [f"[FINAL] video of the greedy episode of best.pt (score {score:,g}): {tmp_path / 'best.mp4'} (61 frames)"]
    film_greedy(cfg, actions, score + 1, str(tmp_path / "other.mp4"), "best.pt", lines.append)  # a replay that differs
    assert lines[-1].startswith("[FINAL] no video: RuntimeError: replay reached score"), lines


def test_evaluation_plays_vector_envs_greedy_and_random():
    """shared/evaluation/episodes.py on Snake and fuel breaks: one episode per env, scores from info, valid actions only."""
    from learner.console import format_eval_line
    from shared.config import EnvConfig
    from shared.evaluation.episodes import build_network, play_episodes, summarize

    fuel = EnvConfig(name="fuelbreak", options={"fuelbreak": FuelbreakOptions(size=12, budget=4)})
    episodes = play_episodes(build_network(fuel), fuel, 5, 0.0, seed=3)
    assert [e.length for e in episodes] == [4] * 5 and all(e.score >= 0 for e in episodes)
    assert all(len(set(e.actions.tolist())) == 4 for e in episodes)  # a cell never takes two breaks
    snake = EnvConfig(name="snake", options={"snake": SnakeOptions(size=6)})
    names = action_names(snake)
    random = play_episodes(None, snake, 12, 1.0, seed=1, policy="random")
    again = play_episodes(None, snake, 12, 1.0, seed=1, policy="random")
    assert [e.score for e in random] == [e.score for e in again] and len(random) == 12  # seeded
    summary = summarize(random, 3, names)
    assert summary["score_mean"] == np.mean([e.score for e in random])
    assert summary["success_rate"] == np.mean([e.success for e in random])
    line = format_eval_line(dict(env_steps=1000, weights_version=2, epsilon=0.05, seconds=1.0, summary=summary, random=summary))
    assert "score mean" in line and "random policy: score mean" in line
