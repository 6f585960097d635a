"""shared/evaluation/names.py: files written under Mario's words read under the generic ones."""

import pytest

from shared.evaluation.names import read_metrics, upgrade


def test_every_old_key_is_renamed_at_any_depth_and_the_generic_one_wins_a_clash():
    old = {
        "summary": {"x_pos_mean": 1.5, "x_pos_median": 1.0, "x_pos_max": 3, "x_pos_min": 0, "x_pos_ci": [1, 2]},
        "flags": 2,
        "flag_rate": 0.4,
        "flag_rate_ci": [0.1, 0.8],
        "episodes": [{"x_pos": 700, "flag": False, "return": 1.0}],
        "selection": [{"x_pos": [1, 2], "in_training": {"x_pos_mean": 3.0, "flag_rate": 0.1}}],
        "eval/x_pos": 5.0,
        "eval/flag_rate": 0.2,
        "actor/distance": 9.0,
        "actor/flag_rate": 0.3,
        "actor/flags": 4,
        "final/last_x_pos": 6.0,
        "final/best_flag_rate": 0.5,
        "final/last_greedy_x_pos": 7,
        "best_x_pos_mean": 8.0,
        "best_flag_rate_mean": 0.6,
    }
    assert upgrade(old) == {
        "summary": {"score_mean": 1.5, "score_median": 1.0, "score_max": 3, "score_min": 0, "score_ci": [1, 2]},
        "successes": 2,
        "success_rate": 0.4,
        "success_rate_ci": [0.1, 0.8],
        "episodes": [{"score": 700, "success": False, "return": 1.0}],
        "selection": [{"score": [1, 2], "in_training": {"score_mean": 3.0, "success_rate": 0.1}}],
        "eval/score": 5.0,
        "eval/success_rate": 0.2,
        "actor/score": 9.0,
        "actor/success_rate": 0.3,
        "actor/successes": 4,
        "final/last_score": 6.0,
        "final/best_success_rate": 0.5,
        "final/last_greedy_score": 7,
        "best_score_mean": 8.0,
        "best_success_rate_mean": 0.6,
    }
    # Snake's rows carried both names (eval/x_pos and eval/score); the generic figure is kept
    assert upgrade({"eval/x_pos": 1.0, "eval/score": 2.5, "x_pos_mean": 1, "score_mean": 2}) == {
        "eval/score": 2.5,
        "score_mean": 2,
    }
    new = {"score_mean": 1.0, "eval/return": 2.0, "env": {"mario": {"stage": "1-1"}}, "x_position": 3}
    assert upgrade(new) == new  # generic and unrelated keys pass unchanged


def test_read_metrics_leaves_out_a_last_line_cut_short_and_refuses_a_broken_one_inside(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "env_steps": 10, "eval/x_pos": 5}\n\n{"step": 2, "env_steps": 20}\n{"step": 3, "env')
    rows, note = read_metrics(str(path))
    assert rows == [{"step": 1, "env_steps": 10, "eval/score": 5}, {"step": 2, "env_steps": 20}]  # upgraded
    assert "line 4 is cut short" in note
    path.write_text('{"step": 1, "env_steps": 10}\n{"step": 2, "env_steps": 20}\n')
    assert read_metrics(str(path)) == ([{"step": 1, "env_steps": 10}, {"step": 2, "env_steps": 20}], "")
    path.write_text('{"step": 1\n{"step": 2, "env_steps": 20}\n')  # broken, then more lines: not a stopped write
    with pytest.raises(ValueError, match="line 1: not valid JSON"):
        read_metrics(str(path))
    path.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match="line 1: not a JSON object"):
        read_metrics(str(path))
