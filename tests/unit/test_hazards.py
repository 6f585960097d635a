"""shared/evaluation/hazards.py: per-hazard pass rates and the histogram of end scores, counted by hand; the envs' clusters and
no-op actions in the registry."""

import pytest

from shared.config import EnvConfig
from shared.envs import entry_for, with_stage
from shared.envs.mario import ACTION_SETS, MarioOptions
from shared.evaluation.hazards import clusters_for, format_hazards, hazard_table


def ep(score, success=False):
    return {"score": score, "success": success, "return": 0.0, "length": 1}


def test_clusters_count_who_reached_each_and_who_ended_there():
    clusters = [("a", 100, 200), ("b", 300, 400)]
    records = [
        ep(50),  # before a: reached neither
        ep(150),  # reached a, ended in a
        ep(250),  # reached a, ended between a and b: in neither
        ep(350),  # reached a and b, ended in b
        ep(500),  # past both
        ep(120, success=True),  # a success reaches every cluster and ends in none, whatever its score
        ep(399.9, success=True),
        ep(200),  # hi is outside its cluster: reached a, ended in none
    ]
    table = hazard_table(records, clusters)
    assert table == {
        "kind": "clusters",
        "episodes": 8,
        "successes": 2,
        "clusters": [
            {"name": "a", "x": [100.0, 200.0], "reached": 7, "ended": 1, "pass_rate": 6 / 7},
            {"name": "b", "x": [300.0, 400.0], "reached": 4, "ended": 1, "pass_rate": 3 / 4},
        ],
    }
    assert format_hazards(table) == "a 86% (6/7), b 75% (3/4)"
    none = hazard_table([ep(10)], [("far", 100, 200)])  # nobody got there: no rate
    assert none["clusters"][0]["reached"] == 0 and none["clusters"][0]["pass_rate"] is None
    assert format_hazards(none) == "far - (0/0)"
    assert hazard_table([{"score": 150, "won": False}], clusters, success_key="won")["clusters"][0]["ended"] == 1


def test_without_clusters_a_histogram_of_where_failed_episodes_end():
    records = [ep(0), ep(10), ep(10), ep(5), ep(2.5), ep(100, success=True)]  # the success is left out, range too
    table = hazard_table(records, [])
    assert table == {
        "kind": "histogram",
        "episodes": 6,
        "successes": 1,
        "edges": [float(x) for x in range(11)],
        "counts": [1, 0, 1, 0, 0, 1, 0, 0, 0, 2],  # the last bin holds its upper edge
    }
    assert hazard_table(records, None) == table
    assert format_hazards(table) == "ends without success by score: [0, 1): 1, [2, 3): 1, [5, 6): 1, [9, 10]: 2"
    won = hazard_table([ep(3, success=True)], None)
    assert (won["edges"], won["counts"], won["successes"]) == ([], [], 1)
    assert format_hazards(won) == "no episode ended without success"


def test_mario_1_1_names_its_hazards_and_other_stages_none():
    clusters = clusters_for(EnvConfig())  # Mario 1-1, the default
    assert clusters == [
        ("goomba", 250.0, 400.0),
        ("pipes", 400.0, 900.0),
        ("pit1", 1050.0, 1250.0),
        ("pit2", 1350.0, 1600.0),
        ("goombas", 1700.0, 2100.0),
        ("stairs", 2100.0, 3200.0),
    ]
    flag, dead_on_stairs = hazard_table([ep(3161, success=True)], clusters), hazard_table([ep(2450)], clusters)
    assert [c["pass_rate"] for c in flag["clusters"]] == [1.0] * 6  # the flag is not a death on the stairs
    assert [c["ended"] for c in dead_on_stairs["clusters"]] == [0, 0, 0, 0, 0, 1]
    assert clusters_for(with_stage(EnvConfig(), "1-2")) == [] and clusters_for(EnvConfig(name="catch")) == []


@pytest.mark.parametrize("buttons", list(ACTION_SETS))
def test_the_noop_action_is_each_envs_own(buttons):
    cfg = EnvConfig(options={"mario": MarioOptions(actions=buttons)})
    assert ACTION_SETS[buttons][entry_for(cfg).noop_of(cfg)] == ["NOOP"]
    assert entry_for("catch").noop_of(EnvConfig(name="catch")) == 1  # Catch's "stay"
    assert entry_for("snake").noop_of(EnvConfig(name="snake")) == 0  # an env that names none
