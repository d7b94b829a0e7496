"""hydra/sweeper=halving: the plan and halving.json (plan.py), the rounds by throughput (by_throughput.py)
and by time to target (to_target.py)."""
