"""hydra/sweeper=race: what a round is, how it is decided, and race.json (rounds.py); the statistics
(stats.py); the rounds run through any launcher (run.py)."""
