"""Trace adapters: exact values on small fixtures, clear file:line errors, and the public traces'
counts as their README gives them."""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import re
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from controller.sim.traces import (DemandSeries, Job, NodeGroup, OnDemandRequest, TraceError, alibaba_series,
                                   azure_requests, bitbrains_series, csv_requests, digest, pool_groups, scale_time,
                                   swf_jobs, swf_read, swf_requests, swf_stats, tile, tile_jobs)

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
DAY = 86400.0


def gzipped(source: Path, tmp_path: Path) -> Path:
    target = tmp_path / (source.name + ".gz")
    target.write_bytes(gzip.compress(source.read_bytes()))
    return target


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def bitbrains_archive(tmp_path: Path, members: dict[str, str] | None = None) -> Path:
    """A tar.gz laid out like the public one: rnd/2013-7/<id>.csv, plus a directory entry."""
    archive = tmp_path / "bitbrains.tar.gz"
    sources = members or {p.name: p.read_text() for p in sorted((DATA / "bitbrains").iterdir())}
    with tarfile.open(archive, "w:gz") as tar:
        folder = tarfile.TarInfo("rnd/2013-7")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, text in sources.items():
            info = tarfile.TarInfo(f"rnd/2013-7/{name}")
            data = text.encode()
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


# ---------------------------------------------------------------- Azure

def request(at, vcpus, memory, lifetime, owner, rid) -> OnDemandRequest:
    return OnDemandRequest(at=at, vcpus=vcpus, memory_mib=memory, lifetime=lifetime, owner=owner,
                           request_id=rid)


def test_azure_on_demand_requests_sized_and_sorted():
    assert azure_requests(DATA / "azure_vm_entries.csv") == [
        request(0.25 * DAY, 1, 768, 0.25 * DAY, "azure-p0", "103"),      # 0.35 of a core -> 1 vCPU
        request(0.25 * DAY, 16, 57344, None, "azure-p0", "104"),         # empty endtime -> to the end
        request(0.5 * DAY, 2, 7168, 0.25 * DAY, "azure-p0", "101"),
        request(1.5 * DAY, 3, 3584, 1.0 * DAY, "azure-p0", "106"),       # 2.8 cores -> 3
    ]


def test_azure_low_priority_both_and_limit(tmp_path):
    path = gzipped(DATA / "azure_vm_entries.csv", tmp_path)
    assert azure_requests(path, priority=1) == [
        request(0.25 * DAY, 8, 28672, None, "azure-p1", "102"),
        request(1.0 * DAY, 8, 28672, 0.125 * DAY, "azure-p1", "105"),
    ]
    assert [r.request_id for r in azure_requests(path, priority=None)] == [
        "102", "103", "104", "101", "105", "106"]
    assert [r.request_id for r in azure_requests(path, limit=2)] == ["103", "101"]
    assert azure_requests(path, limit=0) == []


def test_azure_machine_size_options():
    sized = azure_requests(DATA / "azure_vm_entries.csv", machine_vcpus=52, machine_memory_mib=1000)
    assert [(r.vcpus, r.memory_mib) for r in sized] == [(1, 1), (8, 100), (1, 12), (1, 6)]


@pytest.mark.parametrize("line,says", [
    ("7,1,0,0.1,0.2,abc,0.01,16", "core: expected a number, got 'abc'"),
    ("7,1,0,0.1,0.05,0.01,0.01,16", "endtime 0.05 is before starttime 0.1"),
    ("7,1,0,0.1,0.2,1.5,0.01,16", "core: expected a machine fraction in (0, 1]"),
    ("7,1,x,0.1,0.2,0.01,0.01,16", "priority: expected a number"),
    ("7,1,0,0.1,0.2,0.01,0.01", "expected 8 fields"),
])
def test_azure_malformed_row_names_file_and_line(tmp_path, line, says):
    good = "1,1,0,0.1,0.2,0.01,0.01,16\n"
    path = write(tmp_path, "azure.csv", "vmId,vmTypeId,priority,starttime,endtime,core,memory,machineId\n"
                 + good + line + "\n")
    with pytest.raises(TraceError, match=f"azure.csv:3: .*{re.escape(says)}"):
        azure_requests(path)


def test_azure_header_must_name_the_columns(tmp_path):
    path = write(tmp_path, "azure.csv", "vmId,priority,starttime,core,memory\n1,0,0.1,0.01,0.01\n")
    with pytest.raises(TraceError, match=r"azure.csv:1: header lacks column\(s\) endtime"):
        azure_requests(path)
    with pytest.raises(TraceError, match=r"empty.csv:1: no header line"):
        azure_requests(write(tmp_path, "empty.csv", ""))


# ---------------------------------------------------------------- SWF

def test_swf_jobs_and_skips():
    trace = swf_read(DATA / "jobs.swf")
    assert trace.jobs == [
        Job(submit=0, runtime=3600, procs=8, job_id="1", queue=1),
        Job(submit=120, runtime=900, procs=16, job_id="3", queue=2),   # allocated -1 -> requested
        Job(submit=300, runtime=45, procs=1, job_id="6", queue=2),
        Job(submit=360, runtime=7200, procs=32, job_id="7", queue=1),
    ]
    stats = trace.stats
    assert (stats.records, stats.kept, stats.skipped_runtime, stats.skipped_procs) == (7, 4, 2, 1)
    assert stats.skipped == 3 and stats.other_queue == 0 and stats.max_procs == 64
    assert trace.header["Computer"] == "test cluster" and trace.header["Queue"] == "1 batch"
    assert swf_stats(DATA / "jobs.swf") == stats
    assert swf_jobs(DATA / "jobs.swf") == trace.jobs


def test_swf_queue_filter_and_limit(tmp_path):
    path = gzipped(DATA / "jobs.swf", tmp_path)
    assert [j.job_id for j in swf_jobs(path, queues={2})] == ["3", "6"]
    assert swf_stats(path, queues=[2]).other_queue == 2
    limited = swf_read(path, limit=2)
    assert [j.job_id for j in limited.jobs] == ["1", "3"]
    assert (limited.stats.records, limited.stats.skipped_runtime) == (3, 1)


def test_swf_requests():
    requests = swf_requests(DATA / "jobs.swf", memory_mib_per_vcpu=1024, owner="hpc")
    assert requests[:2] == [request(0, 8, 8192, 3600, "hpc", "1"), request(120, 16, 16384, 900, "hpc", "3")]
    assert [r.request_id for r in requests] == ["1", "3", "6", "7"]
    assert swf_requests(DATA / "jobs.swf")[0].memory_mib == 8 * 4096
    with pytest.raises(ValueError, match="memory_mib_per_vcpu"):
        swf_requests(DATA / "jobs.swf", memory_mib_per_vcpu=0)


@pytest.mark.parametrize("line,says", [
    ("2 10 0 60 1 -1 -1 1 60 -1 1 1 1 1 1 -1 -1", "expected 18 SWF fields, got 17"),
    ("2 10 0 60 2.5 -1 -1 1 60 -1 1 1 1 1 1 -1 -1 -1", "allocated procs (field 5): expected an integer"),
    ("2 ten 0 60 1 -1 -1 1 60 -1 1 1 1 1 1 -1 -1 -1", "submit time (field 2): expected a number"),
])
def test_swf_malformed_line_names_file_and_line(tmp_path, line, says):
    path = write(tmp_path, "bad.swf", "; MaxProcs: 4\n;\n1 0 0 60 1 -1 -1 1 60 -1 1 1 1 1 1 -1 -1 -1\n"
                 + line + "\n")
    with pytest.raises(TraceError, match=f"bad.swf:4: {re.escape(says)}"):
        swf_jobs(path)


# ---------------------------------------------------------------- CPU series

def test_bitbrains_series(tmp_path):
    series = bitbrains_series(bitbrains_archive(tmp_path))
    assert [s.name for s in series] == ["1", "2", "10"]          # natural order; empty VM 3 left out
    one, two, ten = series
    assert one.times.tolist() == [300, 600, 900]                 # from the archive's earliest sample
    assert one.cpu.tolist() == [0.015, 0.5, 1.0]                 # 105 % is capped at 1
    assert two.times.tolist() == [300, 600] and two.cpu.tolist() == [0.75, 0.125]  # sorted by time
    assert ten.times.tolist() == [0, 300] and ten.cpu.tolist() == [0.25, 0.0]
    limited = bitbrains_series(bitbrains_archive(tmp_path), limit=2)
    assert [s.name for s in limited] == ["1", "2"] and limited[0].times[0] == 300


def test_bitbrains_malformed_member_line(tmp_path):
    text = (DATA / "bitbrains" / "1.csv").read_text().splitlines()
    text[2] = text[2].replace("50.0", "fifty")
    archive = bitbrains_archive(tmp_path, {"5.csv": "\n".join(text) + "\n"})
    with pytest.raises(TraceError, match=r"bitbrains.tar.gz\[rnd/2013-7/5.csv\]:3: CPU usage \[%\]: "
                                         r"expected a number, got 'fifty'"):
        bitbrains_series(archive)
    with pytest.raises(TraceError, match=r"\[rnd/2013-7/6.csv\]:1: expected the Bitbrains header"):
        bitbrains_series(bitbrains_archive(tmp_path, {"6.csv": "1;\t2\n"}))
    with pytest.raises(TraceError, match="cannot read the tar archive"):
        bitbrains_series(write(tmp_path, "not.tar.gz", "hello"))


def test_alibaba_series(tmp_path):
    for path in (DATA / "alibaba_usage.csv", gzipped(DATA / "alibaba_usage.csv", tmp_path)):
        series = alibaba_series(path)
        assert [s.name for s in series] == ["m_1", "m_2", "m_10"]
        assert [(s.times.tolist(), s.cpu.tolist()) for s in series] == [
            ([0], [1.0]), ([10, 50], [0.125, 0.1]), ([20, 100], [0.35, 0.4])]
    assert [s.name for s in alibaba_series(DATA / "alibaba_usage.csv", limit=2)] == ["m_1", "m_2"]


@pytest.mark.parametrize("line,says", [
    ("m_1,later,40,,,,,,", "time_stamp: expected a number, got 'later'"),
    ("m_1,30,-5,,,,,,", "cpu_util_percent: must be >= 0"),
    ("m_1,30", "expected machine_id,time_stamp,cpu_util_percent"),
])
def test_alibaba_malformed_line(tmp_path, line, says):
    path = gzipped(write(tmp_path, "usage.csv", "m_1,10,40,90,,,1,1,1\n" + line + "\n"), tmp_path)
    with pytest.raises(TraceError, match=f"usage.csv.gz:2: {re.escape(says)}"):
        alibaba_series(path)


def test_demand_series_is_frozen_and_checked():
    series = DemandSeries("n", [0, 5], [0.5, 1])
    with pytest.raises(ValueError):
        series.cpu[0] = 0.1                      # read-only array
    with pytest.raises(dataclasses.FrozenInstanceError):
        series.name = "m"  # type: ignore[misc]
    with pytest.raises(ValueError, match="non-decreasing"):
        DemandSeries("n", [5, 0], [0.5, 0.5])
    with pytest.raises(ValueError, match="within 0..1"):
        DemandSeries("n", [0], [1.5])
    with pytest.raises(ValueError, match="same length"):
        DemandSeries("n", [0, 1], [0.5])


# ---------------------------------------------------------------- Gleaner's CSV

def test_csv_requests():
    assert csv_requests(DATA / "requests.csv") == [
        request(0, 2, 4096, 3600, "alice", "csv-2"),
        request(10, 1, 512, 60, "trace", "csv-3"),
        request(30.5, 8, 16384, None, "bob", "csv-1"),
    ]


def test_csv_requests_owner_column_optional(tmp_path):
    path = write(tmp_path, "r.csv", "lifetime_s,arrival_s,vcpus,memory_mib\n,5,1,256\n")
    assert csv_requests(gzipped(path, tmp_path)) == [request(5, 1, 256, None, "trace", "csv-1")]


@pytest.mark.parametrize("text,says", [
    ("arrival_s,vcpus,memory_mib,lifetime_s\n0,1,1,1\n0,0,1,1\n", "r.csv:3: vcpus: must be >= 1, got 0"),
    ("arrival_s,vcpus,memory_mib,lifetime_s\n0,1,1,1\n0,1.5,1,1\n", "r.csv:3: vcpus: expected an integer"),
    ("arrival_s,vcpus,memory_mib,lifetime_s\n0,1,1,1\n-1,1,1,1\n", "r.csv:3: arrival_s: must be >= 0"),
    ("arrival_s,vcpus,memory_mib,lifetime_s\n0,1,1,1\n0,1,1,0\n", "r.csv:3: lifetime_s: must be > 0"),
    ("arrival_s,vcpus,memory_mib,lifetime_s\n0,1,1,1\n0,1,1\n", "r.csv:3: expected 4 fields"),
    ("arrival_s,vcpus,memory_mib,lifetime_s\n0,1,1,1\nnan,1,1,1\n", "r.csv:3: arrival_s: expected a finite"),
    ("arrival_s,vcpus,memory_mib,lifetime_s,tenant\n", "r.csv:1: unknown column(s) tenant"),
])
def test_csv_requests_errors(tmp_path, text, says):
    with pytest.raises(TraceError, match=re.escape(says)):
        csv_requests(write(tmp_path, "r.csv", text))


def test_pool_groups(tmp_path):
    path = write(tmp_path, "pool.csv", "# two sizes\nmemory_mib,count,cpus\n65536,3,16\n\n131072,1,32\n")
    assert pool_groups(gzipped(path, tmp_path)) == [NodeGroup(3, 16, 65536), NodeGroup(1, 32, 131072)]


@pytest.mark.parametrize("text,says", [
    ("count,cpus,memory_mib\n1,4,4096\n0,4,4096\n", "p.csv:3: count: must be >= 1, got 0"),
    ("count,cpus,memory_mib\n1,4,4096\n1,2.5,4096\n", "p.csv:3: cpus: expected an integer"),
    ("count,cpus,memory_mib\n1,4097,4096\n", "p.csv:2: cpus: must be <= 4,096, got 4,097"),
    ("count,cpus,memory_mib\n1,4,4294967297\n", "p.csv:2: memory_mib: must be <= 4,294,967,296"),
    ("count,cpus,memory_mib\n60000,4,4096\n50000,4,4096\n", "p.csv:3: count: the pool would have 110,000 nodes"),
    ("count,cpus,memory_mib\n1,4,4096\n1,4\n", "p.csv:3: expected 3 fields"),
    ("count,cpus\n1,4\n", "p.csv:1: header lacks column(s) memory_mib"),
    ("count,cpus,memory_mib\n", "p.csv: no nodes"),
])
def test_pool_groups_errors(tmp_path, text, says):
    with pytest.raises(TraceError, match=re.escape(says)):
        pool_groups(write(tmp_path, "p.csv", text))


def test_trace_error_is_a_value_error():
    assert issubclass(TraceError, ValueError)


def test_digest(tmp_path):
    path = DATA / "jobs.swf"
    assert digest(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    copy = tmp_path / "copy.swf"
    shutil.copy(path, copy)
    assert digest(copy) == digest(path) != digest(DATA / "requests.csv")


# ---------------------------------------------------------------- reshaping

def test_tile_repeats_with_unique_ids():
    base = [request(0, 1, 1, 5, "a", "x"), request(10, 1, 1, None, "a", "y"), request(20, 1, 1, 5, "a", "z")]
    tiled = tile(base, period_s=30, until_s=70)
    assert [(r.at, r.request_id) for r in tiled] == [
        (0, "x"), (10, "y"), (20, "z"), (30, "x#1"), (40, "y#1"), (50, "z#1"), (60, "x#2")]
    assert tiled[4].lifetime is None and tiled[3].lifetime == 5
    assert len({r.request_id for r in tiled}) == len(tiled)
    assert tile(base, 30, 15) == base[:2] and tile([], 30, 1000) == []
    with pytest.raises(ValueError, match="period_s"):
        tile(base, 0, 100)


def test_tile_jobs():
    jobs = [Job(5, 100, 2, "1", 0), Job(15, 50, 1, "2", 0)]
    assert tile_jobs(jobs, 20, 45) == [Job(5, 100, 2, "1", 0), Job(15, 50, 1, "2", 0),
                                       Job(25, 100, 2, "1#1", 0), Job(35, 50, 1, "2#1", 0)]


def test_scale_time():
    base = [request(10, 1, 1, 5, "a", "x"), request(20, 1, 1, None, "a", "y")]
    assert scale_time(base, 3) == [request(30, 1, 1, 15, "a", "x"), request(60, 1, 1, None, "a", "y")]
    assert scale_time(base, 2, durations=False)[0] == request(20, 1, 1, 5, "a", "x")
    assert scale_time([Job(4, 10, 2, "j", 1)], 0.5) == [Job(2, 5, 2, "j", 1)]
    with pytest.raises(ValueError, match="factor"):
        scale_time(base, -1)


# ---------------------------------------------------------------- the public traces

def public(relative: str) -> Path:
    path = TRACES / relative
    if not path.is_file():
        pytest.fail(f"public trace {path} is missing: the tests expect the shared traces at "
                    f"../shared/traces relative to the repository (see its README.md)")
    return path


def test_public_azure_packing_2020():
    path = public("azure_packing_2020/vm_entry_list_5000.csv.gz")
    high, low = azure_requests(path), azure_requests(path, priority=1)
    assert (len(high), len(low)) == (3762, 1238)
    assert len(azure_requests(path, priority=None)) == 5000
    assert (sum(r.lifetime is None for r in high), sum(r.lifetime is None for r in low)) == (54, 23)
    arrivals = [r.at for r in high + low]
    assert min(arrivals) == pytest.approx(1.0, abs=1e-3) and max(arrivals) == pytest.approx(934, abs=1)
    assert np.mean([r.vcpus for r in high]) == pytest.approx(0.034 * 104, rel=0.05)
    assert digest(path).startswith("92236b673d84c131")


def test_public_lublin_256():
    trace = swf_read(public("swf/lublin_256.swf.gz"))
    assert (trace.stats.records, trace.stats.kept, trace.stats.skipped) == (10000, 10000, 0)
    assert trace.stats.max_procs == 256 and max(j.procs for j in trace.jobs) <= 256
    jobs = trace.jobs
    assert (jobs[-1].submit - jobs[0].submit) / DAY == pytest.approx(89.2, abs=0.05)
    assert np.mean([j.runtime for j in jobs]) == pytest.approx(4863, abs=1)
    assert np.mean([j.procs for j in jobs]) == pytest.approx(22, abs=0.5)


def test_public_bitbrains():
    series = bitbrains_series(public("bitbrains_rnd/bitbrains_rnd_2013-7_first7d_100vms.tar.gz"))
    assert len(series) == 100 and sum(len(s.times) for s in series) == 201380
    assert min(s.times[0] for s in series) == 0 and max(s.times[-1] for s in series) < 7 * DAY
    assert sum(s.cpu.max() >= 0.99 for s in series) == 37


def test_public_alibaba_2018():
    series = alibaba_series(public("alibaba_2018/machine_usage.csv.gz"))
    assert [s.name for s in series] == [f"m_{n}" for n in range(1932, 1948)]
    assert sum(len(s.times) for s in series) == 100002
    by_name = {s.name: s for s in series}
    assert by_name["m_1932"].times[0] == 386640 and by_name["m_1947"].times[-1] == 188370
    assert max(s.times[-1] for s in series) == 691180
    assert np.mean(np.concatenate([s.cpu for s in series])) == pytest.approx(0.348, abs=0.001)


def test_the_shipped_example_is_the_azure_sample_in_gleaners_csv_and_the_readme_runs_it():
    """controller/sim/examples/azure-on-demand.csv.gz is what the README's example reads: every
    priority-0 request of the Azure sample, in the same order, sizes and lifetimes."""
    repo = Path(__file__).resolve().parents[2]
    example = repo / "controller" / "sim" / "examples" / "azure-on-demand.csv.gz"
    shipped = csv_requests(example)
    assert len(shipped) == 3762
    sample = Path(__file__).resolve().parents[3] / "shared" / "traces" / "azure_packing_2020" / "vm_entry_list_5000.csv.gz"
    if sample.exists():   # beside the repository on the development machines
        original = azure_requests(sample)
        assert [(round(r.at, 3), r.vcpus, r.memory_mib, None if r.lifetime is None else round(r.lifetime, 3))
                for r in original] == [(round(r.at, 3), r.vcpus, r.memory_mib,
                                        None if r.lifetime is None else round(r.lifetime, 3)) for r in shipped]
    readme = (repo / "README.md").read_text()
    assert "--requests controller/sim/examples/azure-on-demand.csv.gz" in readme
    assert (repo / "controller" / "sim" / "examples" / "week-utilization.png").exists()
