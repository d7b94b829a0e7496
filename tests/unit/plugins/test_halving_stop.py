"""hydra/sweeper=halving stopped by a signal: its last line names sweep.resume and the round it stopped in."""
import pytest

from fastpipe.errors import EXIT_PREEMPTED
from hydra_plugins.fastpipe_sweeps.halving_sweeper import HalvingSweeper


class StoppedLauncher:
    """Hydra's basic launcher when a job was stopped by SIGTERM: the job's SystemExit(75) ends the launch."""

    def launch(self, job_overrides, initial_job_idx):
        raise SystemExit(EXIT_PREEMPTED)


def test_a_signal_during_a_round_ends_the_sweep_with_75_and_names_sweep_resume(capsys):
    sweeper = HalvingSweeper()
    sweeper.launcher = StoppedLauncher()
    with pytest.raises(SystemExit) as stop:
        sweeper.launch_batch([["precision=amp", "train.max_steps=32"]], "round 2 (its probes in probe-2/)")
    assert stop.value.code == EXIT_PREEMPTED
    assert capsys.readouterr().err == (
        "fastpipe: error: the halving sweep stopped during round 2 (its probes in probe-2/); run the same command "
        "with sweep.resume=true to continue it (the probes and full runs that finished are kept, a stopped job "
        "continues from its checkpoint)\n")
