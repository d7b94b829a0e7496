"""One training job, from its first line to its record: the runtime, the searches ``auto`` asks for
(finders/), the training graph, the loop, the evaluation, the files (training.py), and graph.txt's text
(graph_text.py)."""
