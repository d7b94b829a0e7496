"""The compile group without compiling: fall-backs to eager, and the switches that need torch.compile."""
from __future__ import annotations

import math

from conftest import TINY, make_settings, run_in_process


def test_compile_failure_falls_back_to_eager_and_keeps_training(tmp_path):
    m = run_in_process(tmp_path, TINY + ["compile=default", "compile.fullgraph=true",
                                         "model._target_=helper_models.GraphBreakCNN"])
    assert m["status"] == "ok" and m["steps"] == 12 and math.isfinite(m["final_loss"])
    assert m["compile_fallback"] and any("continuing eager" in w for w in m["warnings"])
    assert "FELL BACK TO EAGER" in (tmp_path / "graph.txt").read_text()


RUN = ["dataset.num_images=200", "dataset.image_size=16", "train.batch_size=16", "train.max_steps=4",
       "measure.warmup_steps=2", "measure.window=3", "runtime.progress=false", "data.num_workers=0"]


def test_compile_failure_falls_back_to_eager(tmp_path):
    metrics = run_in_process(tmp_path, RUN + ["compile=default", "compile.backend=no_such_backend"])
    assert metrics["status"] == "ok" and metrics["steps"] == 4
    assert metrics["compile_fallback"].startswith("InvalidBackend: Invalid backend: 'no_such_backend'")
    assert any("compile=default failed, continuing eager" in w for w in metrics["warnings"])


def test_dynamo_ddp_and_autograd_switches_are_described_or_said_to_do_nothing():
    from conftest import cpu_runtime
    from fastpipe.record.run_warnings import collect_warnings
    from fastpipe.train import graph
    from fastpipe.job.graph_text import describe

    def built(*overrides):
        settings = make_settings(list(TINY) + list(overrides))
        with collect_warnings([]) as warnings:
            g = graph.build(settings, cpu_runtime())
        return g, warnings, settings

    g, warnings, settings = built("compile=default", "compile.compiled_autograd=true")
    assert g.compiled.backward_backend == "inductor" and "compiled_autograd" in describe(g, settings) and not warnings
    _, warnings, _ = built("compile=off", "compile.compiled_autograd=true")
    assert any("compile=off:  compiled_autograd take(s) effect only with torch.compile" in w for w in warnings)
    _, warnings, _ = built("compile=default", "compile.optimize_ddp=python_reducer")
    assert any("compile.optimize_ddp=python_reducer shapes how Dynamo compiles a DDP model; with launcher=single"
               in w for w in warnings)
