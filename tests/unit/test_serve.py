from __future__ import annotations

from pathlib import Path

from jobnik.scripts.serve import metrics_directory


def test_one_server_process_keeps_its_metrics_in_memory() -> None:
    with metrics_directory(1, None) as directory:
        assert directory is None


def test_several_processes_get_a_directory_removed_when_the_run_ends() -> None:
    with metrics_directory(2, None) as directory:
        assert directory is not None
        made = Path(directory)
        assert made.is_dir()
        (made / "counter_123.db").write_bytes(b"x")

    assert not made.exists()


def test_a_given_directory_is_emptied_of_an_earlier_runs_samples_and_kept(tmp_path: Path) -> None:
    given = tmp_path / "metrics"
    given.mkdir()
    (given / "histogram_99.db").write_bytes(b"old")
    (given / "notes.txt").write_text("mine")

    with metrics_directory(1, str(given)) as directory:
        assert directory == str(given)
        assert sorted(p.name for p in given.iterdir()) == ["notes.txt"]

    assert given.is_dir()
