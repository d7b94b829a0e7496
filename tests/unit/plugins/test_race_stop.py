"""hydra/sweeper=race stopped by a signal: exit code 75 and a line naming the round, on the basic launcher
(the sweeper's line) and on hydra/launcher=gpus (the launcher's own, stopping.py), in races of stub jobs."""
import pytest

from fastpipe.errors import EXIT_PREEMPTED
from fastpipe.sweeps.race.rounds import RaceSettings, read
from fastpipe.sweeps.race.run import new_record, run_race
from hydra_plugins.fastpipe_sweeps.race_sweeper import RaceSweeper
from race_stubs import StubLaunch


class BasicLauncher:
    """Hydra's basic launcher over stub jobs: a job stopped by SIGTERM ends the launch with SystemExit(75)."""

    def __init__(self, stub):
        self.stub = stub

    def launch(self, job_overrides, initial_job_idx):
        self.stub(job_overrides, "")
        return []


def gpus_lanes(stub, monkeypatch):
    """hydra/launcher=gpus over stub jobs: in the round the signal reaches, its pool ends as a stopped one.
    The classes are made here, not at import: Hydra's plugin scan (Plugins.instance(), which importing
    fastpipe.__main__ starts) runs the plugin modules again, and grid.py's isinstance check must see the
    GpusLauncher of now."""
    from hydra_plugins.fastpipe_sweeps import gpus_launcher, stopping

    class Signalled(stopping.SweepStop):
        """The pool's stop once SIGTERM reached the sweep process (stopping.py's ``forward``)."""

        def __init__(self):
            super().__init__()
            self.code, self.reason = EXIT_PREEMPTED, "stopped by SIGTERM"

    class GpusLanes(gpus_launcher.GpusLauncher):
        def launch(self, job_overrides, initial_job_idx):
            try:
                stub(job_overrides, "")
            except SystemExit:  # the stub's signal: the jobs stopped, the pool (_run) ends the sweep
                monkeypatch.setattr(gpus_launcher, "SweepStop", Signalled)
                self._run([])
            return []

    return GpusLanes()


def stopped_race(tmp_path, launcher):
    """A race of two stub jobs from seed 100 through ``launcher``, stopped in round 3; its exit code."""
    sweeper = RaceSweeper()
    sweeper.launcher = launcher(StubLaunch(tmp_path, lambda n, seed: 10.0 + n, stop_in_round=3))
    record = new_record([["optimizer.lr=0"], ["optimizer.lr=1"]], 100, 0, RaceSettings(), "training", 1)
    with pytest.raises(SystemExit) as stop:
        run_race(sweeper.launch_batch, record, RaceSettings(), tmp_path, "training")
    assert [r["round"] for r in read(tmp_path).rounds] == [0, 1, 2]  # the finished rounds are kept
    return stop.value.code


def fastpipe_lines(capsys) -> list:
    """fastpipe's own lines on stderr. The race also logs its rounds through Python's logging, whose
    handlers an earlier in-process Hydra job of this test worker may have left on a closed stream."""
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("fastpipe:")]


def test_a_signal_on_the_basic_launcher_ends_the_race_with_75_naming_the_round(tmp_path, capsys):
    assert stopped_race(tmp_path, BasicLauncher) == EXIT_PREEMPTED
    assert fastpipe_lines(capsys) == [
        "fastpipe: error: the race stopped during round 3 (seed 103); run the same command with sweep.resume=true "
        "to continue it (the rounds that finished are kept, a stopped job continues from its checkpoint)"]


def test_a_signal_on_the_gpus_launcher_ends_the_race_with_75_and_its_line_names_the_round(tmp_path, capsys,
                                                                                         monkeypatch):
    assert stopped_race(tmp_path, lambda stub: gpus_lanes(stub, monkeypatch)) == EXIT_PREEMPTED
    assert fastpipe_lines(capsys) == [
        "fastpipe: error: stopped by SIGTERM: the race stopped during round 3 (seed 103); the running jobs stopped "
        "(a job that had begun training checkpointed first); run the same command with sweep.resume=true to finish "
        "the sweep"]  # one line: the sweeper leaves it to the launcher's
