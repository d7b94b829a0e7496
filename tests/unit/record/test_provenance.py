"""metrics.json's ``code``: a project in a fresh git repository, clean, dirty, with an untracked file; outside
one it is null; the patch kept as code.diff applies to the commit and gives the tree the run saw."""
from __future__ import annotations

import hashlib
import subprocess

import pytest

from conftest import REPO
from fastpipe.record import provenance
from fastpipe.record.provenance import code_provenance


def git(folder, *args) -> str:
    return subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", "-C", str(folder), *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def project(tmp_path):
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "model.py").write_text("width = 8\n")
    (repo / ".gitignore").write_text("outputs/\n*.log\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def test_a_clean_tree_gives_its_commit_and_branch(project):
    code, diff = code_provenance(project)
    assert code["project"] == {"commit": git(project, "rev-parse", "HEAD"), "branch": "main", "dirty": False,
                               "diff_sha256": None}
    assert diff is None
    (project / "train.log").write_text("ignored by .gitignore\n")  # ignored files do not count
    assert code_provenance(project)[0]["project"]["dirty"] is False


def test_a_changed_file_is_dirty_and_its_patch_applies_to_the_commit(project, tmp_path):
    (project / "model.py").write_text("width = 16\n")
    (project / "data.py").write_text("rows = 3")  # untracked, not ignored, no final newline
    code, diff = code_provenance(project)
    assert code["project"]["dirty"] is True and code["project"]["commit"] == git(project, "rev-parse", "HEAD")
    assert code["project"]["diff_sha256"] == hashlib.sha256(diff.encode()).hexdigest()
    assert "+width = 16" in diff and "+++ b/data.py" in diff
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(project), str(clone))
    (tmp_path / "code.diff").write_text(diff)
    git(clone, "apply", str(tmp_path / "code.diff"))  # the commit plus code.diff is the tree the run saw
    assert (clone / "model.py").read_text() == "width = 16\n" and (clone / "data.py").read_text() == "rows = 3"


def test_an_untracked_file_alone_makes_the_tree_dirty(project):
    (project / "notes.txt").write_text("a\n")
    code, diff = code_provenance(project)
    assert code["project"]["dirty"] is True and "+++ b/notes.txt" in diff


def test_what_fastpipe_writes_is_not_the_projects_code(project):
    run_dir = project / "runs" / "2026-12-01" / "12-00-00"  # a run folder git does not ignore
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.json").write_text("{}")
    (project / "mlflow.db").write_bytes(b"\0sqlite")
    assert code_provenance(project, written=[run_dir])[0]["project"]["dirty"] is False
    assert code_provenance(project)[0]["project"]["dirty"] is True  # without being told, it counts


def test_a_run_from_a_sub_folder_leaves_out_only_its_run_folders(project):
    # The project lives in app/ of a larger repository and runs from there: an edit in app/ is the run's
    # code; app/outputs/ (the run folder's top folder under the working folder) and ../runs/ are not.
    app = project / "app"
    app.mkdir()
    (app / "model.py").write_text("depth = 2\n")
    git(project, "add", ".")
    git(project, "commit", "-q", "-m", "app")
    runs = [app / "outputs" / "2026-12-01" / "12-00-00", project / "runs" / "s" / "0"]
    for run_dir in runs:
        run_dir.mkdir(parents=True)
        (run_dir / "metrics.json").write_text("{}")
    assert code_provenance(app, written=runs)[0]["project"]["dirty"] is False
    (app / "model.py").write_text("depth = 3\n")
    code, diff = code_provenance(app, written=runs)
    assert code["project"]["dirty"] is True and "+depth = 3" in diff and "metrics.json" not in diff
    assert code_provenance(app, written=[app])[0]["project"]["dirty"] is True  # a run folder holding the code: kept


def test_a_large_patch_is_recorded_by_its_hash_only(project, monkeypatch):
    monkeypatch.setattr(provenance, "DIFF_LIMIT", 100)
    (project / "big.py").write_text("x = 1\n" * 100)
    code, diff = code_provenance(project)
    assert diff is None and len(code["project"]["diff_sha256"]) == 64


def test_outside_a_repository_the_project_is_null(tmp_path):
    code, diff = code_provenance(tmp_path)
    assert code["project"] is None and diff is None
    assert code["fastpipe"]["version"]


def test_fastpipe_names_its_own_commit_when_it_runs_from_a_checkout():
    import fastpipe

    inside = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    expected = inside.stdout.strip() if inside.returncode == 0 else None
    assert provenance.fastpipe_code() == {"version": fastpipe.__version__, "commit": expected}


def test_a_sweep_report_names_the_code_and_says_when_its_jobs_ran_different_commits():
    from types import SimpleNamespace

    from fastpipe.report.header import provenance_lines

    def code(commit, dirty=False):
        return {"project": {"commit": commit * 40, "branch": "main", "dirty": dirty,
                            "diff_sha256": "d" * 64 if dirty else None}, "fastpipe": {"version": "0.2.0", "commit": None}}

    def rows(*codes):
        return SimpleNamespace(rows=[{"code": c, "name": "ladder", "tags": ["h200"]} for c in codes])

    assert provenance_lines(rows(code("a"), code("a"))) == ["- code: project aaaaaaaaaaaa (main, clean) · fastpipe 0.2.0",
                                                            "- name: ladder · tags: h200"]
    for other in (code("b"), code("a", dirty=True)):  # another commit, or the same one with changes
        lines = provenance_lines(rows(code("a"), other))
        assert lines[1].startswith("- WARNING: the jobs ran on 2 different commits or working trees"), lines


def test_a_sweep_report_names_the_jobs_logger_choice():
    from types import SimpleNamespace

    from fastpipe.report.header import provenance_lines

    rows = SimpleNamespace(rows=[{"choices": {"logger": "[tensorboard,mlflow]", "compile": "off"}},
                                 {"choices": {"logger": "[tensorboard,mlflow]"}}, {"choices": {}}])
    assert provenance_lines(rows) == ["- logger: [tensorboard,mlflow]"]
