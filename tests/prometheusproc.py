"""A real Prometheus (Debian's package) for tests: scraping a pool's endpoints with Gleaner's
alert rules, answering queries, and the dashboard's panels drawn from its answers."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.agentproc import REPO, free_port

RULES = REPO / "deploy" / "prometheus" / "gleaner-rules.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "gleaner-dashboard.json"


def promtool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


@dataclass
class PrometheusProcess:
    """Prometheus on a free loopback port, its data in `workdir`, scraping every second."""
    workdir: Path
    controller: str                  # HOST:PORT of the controller's /metrics
    agents: list[str]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def config_path(self) -> Path:
        return self.workdir / "prometheus.yml"

    def write_config(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        rules = self.workdir / "gleaner-rules.yml"
        shutil.copy(RULES, rules)
        text = "\n".join([
            "global:", "  scrape_interval: 1s", "  evaluation_interval: 1s",
            "rule_files:", f"  - {rules}",
            "scrape_configs:",
            "  - job_name: gleaner-controller", "    static_configs:", f"      - targets: [{json.dumps(self.controller)}]",
            "  - job_name: gleaner-agent", "    static_configs:",
            f"      - targets: [{', '.join(json.dumps(a) for a in self.agents)}]", ""])
        self.config_path.write_text(text)

    def start(self) -> PrometheusProcess:
        self.write_config()
        log = open(self.workdir / "prometheus.log", "w")
        self.process = subprocess.Popen(
            ["prometheus", f"--config.file={self.config_path}", f"--storage.tsdb.path={self.workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=1d"],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"prometheus did not start: {(self.workdir / 'prometheus.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)

    def api(self, path: str, **params: Any) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                answer = json.loads(reply.read())
        except urllib.error.HTTPError as exc:   # a bad query: Prometheus says why in the body
            answer = json.loads(exc.read())
        if answer.get("status") != "success":
            raise AssertionError(f"{path} {params}: {answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def query(self, expr: str) -> list[dict]:
        return self.api("query", query=expr)["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def alert_rules(self) -> dict[str, dict]:
        """alert name -> the rule as Prometheus loaded it (its query, health, last error)."""
        return {rule["name"]: rule for group in self.api("rules")["groups"] for rule in group["rules"]
                if rule["type"] == "alerting"}

    def firing(self, name: str) -> list[dict]:
        return [a for a in self.api("alerts")["alerts"] if a["labels"].get("alertname") == name
                and a["state"] == "firing"]


def dashboard_panels(path: Path = DASHBOARD) -> list[dict]:
    return json.loads(path.read_text())["panels"]


def render_dashboard(prometheus: PrometheusProcess, start: float, end: float, out: Path) -> Path:
    """Each panel of the dashboard drawn from Prometheus' answers to its queries over [start, end],
    as Grafana would lay them out (two columns), into a PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = dashboard_panels()
    rows = (len(panels) + 1) // 2
    figure, axes = plt.subplots(rows, 2, figsize=(14, 3.2 * rows), squeeze=False)
    step = max((end - start) / 200, 1.0)
    for axis, panel in zip(axes.flat, panels):
        for target in panel["targets"]:
            for series in prometheus.query_range(target["expr"], start, end, step):
                times = [float(t) - start for t, _v in series["values"]]
                values = [float(v) for _t, v in series["values"]]
                label = re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: series["metric"].get(m.group(1), ""),
                               target.get("legendFormat", ""))   # as Grafana: a label not there is ""
                axis.plot(times, values, label=" ".join(label.split()) or target["refId"])
        axis.set_title(panel["title"], fontsize=9)
        axis.set_xlabel("seconds", fontsize=8)
        axis.tick_params(labelsize=7)
        if axis.lines:
            axis.legend(fontsize=7)
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    figure.tight_layout()
    figure.savefig(out, dpi=80)
    plt.close(figure)
    return out
