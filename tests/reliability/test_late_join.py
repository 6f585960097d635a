"""An actor that joins late (after several broadcasts) has the current weights before its first action."""

from actors.collector import actor_main
from launch.processes import spawn_context, start_process
from learner.weight_server import WeightServer
from tests.support.networks import nets


def test_new_actor_acts_first_with_the_current_weights(make_config):
    """An actor joining after several broadcasts has the current weights before its first action."""
    cfg = make_config(actors=1, envs=1, steps=8)
    cfg.actor.weights_timeout = 30.0
    cfg.learner.exact_ratio = False  # no learner reads the experience: the actor must not wait for one
    learner_net, _ = nets()
    server = WeightServer(cfg.transport)
    for version in range(1, 8):  # several broadcasts before the actor exists
        server.publish(version, learner_net)
    server.start()
    ctx = spawn_context()
    stop, reports = ctx.Event(), ctx.Queue()
    proc = start_process(ctx, actor_main, (cfg, 0, stop, reports, 2), "actor-0")
    try:
        report = reports.get(timeout=60)
    finally:
        proc.join(timeout=20)
        server.stop()
    assert proc.exitcode == 0
    assert report["first_action_weights_version"] == 7
