"""hydra/sweeper=race: the plan and race.json (plan.py), the statistics (stats.py), the rounds (run.py)."""
