"""The training job: the stage builder (graph), the loop, held-out evaluation, the batch-size search."""
