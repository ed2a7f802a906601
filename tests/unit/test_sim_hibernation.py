"""The simulator's hibernation (controller/sim/hibernation.py, jobs.py): the same requests and jobs
run with interruption = terminate and = hibernate. Saved VMs are resumed, their jobs go on where
they stood (job time lost falls), and placement is untouched (the same requests rejected)."""
from __future__ import annotations

import json

from controller.sim import cli

from .test_sim import AZURE, azure  # noqa: F401  (the shared trace's fixture)

SWF = AZURE.parents[1] / "swf" / "SDSC-SP2-1998-4.2-cln.swf.gz"


def figures(tmp_path, interruption: str) -> dict:
    out = tmp_path / interruption
    assert cli.main(["--requests", str(AZURE), "--format", "azure", "--load", "0.6", "--nodes", "12", "--days", "1",
                     "--backfill", "enabled=true", f"interruption={interruption}", "--backfill-jobs", str(SWF),
                     "--backfill-jobs-load", "1.0", "--agents", "modelled", "--quiet", "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())["figures"]


def test_hibernation_keeps_the_jobs_work_and_changes_no_placement(azure, tmp_path):  # noqa: F811
    terminated, saved = figures(tmp_path, "terminate"), figures(tmp_path, "hibernate")
    assert "hibernations" not in terminated
    assert saved["hibernations"] > 0 and saved["hibernated_resumed"] > 0
    assert saved["requests_rejected"] == terminated["requests_rejected"]
    assert saved["backfill_job_lost_share"] < terminated["backfill_job_lost_share"] / 5
    assert saved["resume_delay_p50_s"] > 0 and saved["hibernated_disk_peak_mib_p99_node"] > 0
