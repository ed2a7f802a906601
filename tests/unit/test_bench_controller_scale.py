"""The controller-scale bench runs end to end on a small pool (its full run is 10,000 nodes and
takes a minute): a change to the ledger's calls it wraps must not break it unseen."""
from __future__ import annotations

import json
import subprocess
import sys


def test_the_controller_scale_bench_runs_on_a_small_pool():
    out = subprocess.run([sys.executable, "-m", "tests.bench.controller_scale", "--nodes", "40", "--vms-per-node",
                          "10", "--requests", "5", "--report-seconds", "1", "--report-rounds", "1",
                          "--report-nodes", "8"], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout)
    for key in ("decision_p50_ms", "decision_p99_ms", "reports_per_s", "reports_per_s_mixed"):
        assert figures[key] > 0, key
    assert figures["selection_ms"] >= 0   # 40 nodes: it may round to 0.0
    # unchanged reports take the ledger's shortcut; a tenth of the mixed ones change and are matched
    assert figures["matched_reports_rounds"] == [0] and figures["matched_reports_mixed_rounds"][0] > 0
    assert figures["lost_after_settle"] == [0]
