"""The fresh cells' status: what is left, in the order the evaluation runs, with the values
each tuning has kept."""

from studies.fresh_cells import evaluate, settings, status


def test_status_lists_what_is_left_in_the_order_it_runs(tmp_path, capsys):
    names = evaluate.optimizers(None)
    order = evaluate.work_order(settings.CELLS, names)
    for name, task, horizon in order[:3]:  # the first three results are in
        (tmp_path / "results" / name).mkdir(parents=True, exist_ok=True)
        (tmp_path / "results" / name / f"{task}@{horizon}.json").write_text("{}")
    name, task, horizon = order[3]
    kept = tmp_path / "cache" / name / f"{task}@{horizon}"
    kept.mkdir(parents=True)
    for v in (0.01, 0.1):
        (kept / f"value_{v}.json").write_text("{}")
    left = status.pending(names, tmp_path / "results", tmp_path / "cache")
    assert [(n, k) for n, k, _ in left] == [(n, f"{t}@{h}") for n, t, h in order[3:]]
    assert left[0][2] == 2 and all(kept == 0 for _, _, kept in left[1:])
    status.main(
        ["--results-dir", str(tmp_path / "results"), "--cache-dir", str(tmp_path / "cache")]
    )
    out = capsys.readouterr().out
    assert out.startswith(f"3 of {len(order)} results in") and "(2 values kept)" in out
