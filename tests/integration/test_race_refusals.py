"""hydra/sweeper=race refuses a grid it cannot race, in one line, before any job runs (issue 31): the check
(sweeps/race/rounds.py) raises it, the plugin's refusal prints it."""
import pytest
from omegaconf import OmegaConf

from fastpipe.errors import EXIT_CODE
from fastpipe.sweeps.race.rounds import check_grid
from hydra_plugins.fastpipe_sweeps.grid import refuse


def refuse_unraceable(configs):
    try:
        check_grid(configs)
    except Exception as exc:
        refuse(exc)


def config(objective="time_to_target", seed=0, repeats=1):
    return OmegaConf.create({"report": {"objective": objective, "repeats": repeats}, "seed": seed})


@pytest.mark.parametrize("configs, message", [
    ([config("throughput"), config("throughput")], "hydra/sweeper=race races by time to target: add "
                                                   "report.objective=time_to_target"),
    ([config(seed=0), config(seed=1)], "hydra/sweeper=race gives every job of round k the seed seed+k itself: "
                                       "drop seed from the sweep's lists"),
    ([config(repeats=3), config(repeats=3)], "report.repeats inside hydra/sweeper=race: the race decides how many"),
    ([config()], "hydra/sweeper=race needs at least two configurations to race, the grid has 1"),
])
def test_a_grid_the_race_cannot_run_is_one_line(configs, message, capsys):
    with pytest.raises(SystemExit) as stop:
        refuse_unraceable(configs)
    err = capsys.readouterr().err
    assert stop.value.code == EXIT_CODE and err.startswith(f"fastpipe: error: {message}") and err.count("\n") == 1


def test_a_raceable_grid_passes():
    check_grid([config(), config()])


def test_a_race_that_could_never_send_one_out_is_refused_before_any_job(tmp_path):
    # issue 54: with the alpha shared by the 28 pairs of 8 configurations, 10 seeds cannot separate any two
    from conftest import TINY, in_process

    proc = in_process(["-m", "hydra/sweeper=race", "optimizer.lr=1,2,3,4,5,6,7,8", "report.objective=time_to_target",
                       "train.target=0.5", "train.eval_every=4", *TINY, f"hydra.sweep.dir={tmp_path}"])
    assert proc.returncode == EXIT_CODE and proc.stderr.count("fastpipe: error:") == 1
    assert ("a race of 8 configurations at alpha 0.05 cannot send any out within hydra.sweeper.max_rounds=10 seeds "
            "(28 pairs share the alpha): raise it to at least 11") in proc.stderr
    assert not any(tmp_path.glob("*/round-*"))
