"""benchmarks/lib/runner.py's pure helpers: tables, jsonl rows, the deadline."""
from __future__ import annotations

from conftest import load_benchmark_runner


def test_runner_tables_rows_and_deadline(tmp_path):
    runner = load_benchmark_runner()
    rows = [{"name": "a", "v": 1234.5, "status": "ok"},
            {"name": "b|c", "v": None, "status": "failed", "reason": "boom"},
            runner.skipped("skipped: no time left (3 s left)", name="d")]
    text = runner.write_markdown_table(tmp_path / "t.md", rows, [("name", "name"), ("value", "v", ",.0f"),
                                                                 ("status", runner.status_text)], "title", ["note"])
    assert text == (tmp_path / "t.md").read_text()
    assert text.splitlines() == ["title", "", "| name | value | status |", "| --- | ---: | --- |", "| a | 1,234 | ok |",
                                 "| b/c | — | failed: boom |", "| d | — | skipped: no time left (3 s left) |", "", "note"]
    runner.append_jsonl(tmp_path / "r.jsonl", {"a": 1})
    with open(tmp_path / "r.jsonl", "a") as f:
        f.write('{"cut off')  # a line a kill left half-written
    runner.append_jsonl(tmp_path / "r.jsonl", {"a": 2})
    assert runner.read_jsonl(tmp_path / "r.jsonl") == [{"a": 1}]  # the broken line swallowed the next one's start
    (tmp_path / "r2.jsonl").write_text('{"a": 1}\n{"cut\n{"a": 3}\n')
    assert runner.read_jsonl(tmp_path / "r2.jsonl") == [{"a": 1}, {"a": 3}]
    assert runner.median([3, None, 1, 2]) == 2 and runner.median([]) is None

    unlimited = runner.Deadline(None)
    assert unlimited.skip_reason("x") is None and unlimited.timeout(600) == 600
    short = runner.Deadline(runner.KILL_GRACE_S + 20, floor_s=30)
    assert short.skip_reason("x").startswith("skipped: no time left (")
    assert short.timeout(600) <= 20
    short.record("y", 5.0)
    assert short.skip_reason("y") is None  # a kind that ran in 5 s fits in ~20 s
