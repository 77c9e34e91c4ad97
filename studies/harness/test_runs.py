import json
import math

from studies import common
from studies.celo2_headline import run_stats
from studies.harness import runs


def _run_dir(path, steps, seconds):
    path.mkdir(parents=True)
    records = [
        {"step": t, "seconds": seconds(t), "mean_inner_step": float(t), "max_inner_step": 2 * t}
        | ({"diverged": 1} if t == 3 else {})
        for t in range(1, steps + 1)
    ]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    session = {"from_step": 0, "started": "2026-01-01T00:00:00", "options": {}, "environment": {}}
    (path / "sessions.jsonl").write_text(json.dumps(session) + "\n")
    return path


def test_run_summary_holds_what_the_report_reads_from_the_metrics(tmp_path):
    """`run_stats.json` made from the run summaries is what it was made from the metrics: the
    totals, the blocks, and the wall time over the stretches the study names."""
    results = tmp_path / "results"
    run = _run_dir(results / "main" / "pes_celo2" / "s0", 5000, lambda t: 1.0 + (t % 7) / 7)
    summary = run_stats.run_summary(run, "main/pes_celo2/s0")
    assert (summary["outer_steps"], summary["max_inner_step"], summary["diverged"]) == (
        5000,
        10000,
        1,
    )
    assert [b["steps"] for b in summary["blocks"]] == [
        [1 + 1000 * i, 1000 * (i + 1)] for i in range(5)
    ]
    assert summary["sessions"][0]["from_step"] == 0
    common.write_json(run / runs.RUN_SUMMARY, summary)
    (stretch,) = run_stats.contention(results)[:1]
    seconds = [1.0 + (t % 7) / 7 for t in range(4777, 4877)]
    assert stretch["count"] == 100 and math.isclose(
        stretch["mean_seconds"], sum(seconds) / 100, rel_tol=1e-12
    )
    assert stretch["condition"] == run_stats.CONTENTION[0][3]
    # The stretches the study names in other runs are left out while those runs have no summary.
    assert {c["run"] for c in run_stats.contention(results)} == {"main/pes_celo2/s0"}
