"""What ``auto`` leaves to a search before a run trains: the batch size (``train.batch_size=auto``,
batch_size.py) and the learning rate (``optimizer.lr=auto``, the range test: lr_range.py runs it, lr_curve.py
reads a rate off its curve and writes its files). Each builds the run's stages with the one stage builder
(train/graph.py) and runs the run's own training step; the job (job/training.py) calls them."""
