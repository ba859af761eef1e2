"""verl-pdbg-compare --ray on a real multi-node Ray cluster on this machine (Ray's own test utility,
ray.cluster_utils.Cluster): a head with no CPU, two nodes holding the custom resource "dumps" (the
nodes that read the dumps) and one without it. Real L1 dumps written by the runtime profiler
(make_compare_dumps.py: golden, and blocks.3.fc's weight scaled by 1.01), 2 steps x 3 stages.
Fault injection only where a worker has to die."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from verl_pdbg_conf.compare.ray_cluster import ClusterError, run_ray  # noqa: E402
from verl_pdbg_conf.compare.engine import compare_pair  # noqa: E402
from verl_pdbg_conf.compare.modes import UsageError, compare_ranks, compare_runs  # noqa: E402
from verl_pdbg_conf.compare.verdict import ExitCode  # noqa: E402
from verl_pdbg_conf.compare.options import CompareOptions

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
REPO = HERE.parent
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
FIRST = "Functional.linear.3.forward.input.1"  # blocks.3.fc's weight, as F.linear's second input


def _make_dumps(out: Path, level: str, ranks: list[list[str]], *extra: str) -> None:
    """make_compare_dumps.py into out, one writer process per [rank, world, port] at once."""
    cfg = out / f"{level}.json"
    cfg.write_text(json.dumps({"task": "statistics", "level": level, "rank": [], "step": [], "async_dump": False,
                               "statistics": {"scope": [], "list": [], "data_mode": ["all"]}}))
    procs = [subprocess.Popen([sys.executable, str(HERE / "make_compare_dumps.py"), str(out), str(cfg), *r, *extra],
                              cwd=out, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in ranks]
    for proc in procs:
        log, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, log[-3000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ray_runs")
    _make_dumps(out, "L1", [["0", "0", "0"]], "--steps", "1,2", "--variants", "golden,scaled")
    return out


@pytest.fixture(scope="module")
def ranked(tmp_path_factory) -> Path:
    """One run on 2 gloo ranks (rank<N> directories, mix level): what --ranks compares."""
    out = tmp_path_factory.mktemp("ray_ranked")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = str(sock.getsockname()[1])
    _make_dumps(out, "mix", [["0", "2", port], ["1", "2", port]], "--steps", "1", "--variants", "golden")
    return out / "golden"


@pytest.fixture(scope="module")
def cluster():
    """head (0 CPU) + two nodes with the "dumps" resource + one node without it; this process joins."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", ENV["PYTHONPATH"])  # the nodes' workers import this checkout
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        readers = [c.add_node(num_cpus=1, resources={"dumps": 1}) for _ in range(2)]
        other = c.add_node(num_cpus=1)
        c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the fault-injecting jobs below
    c.readers = {n.node_id for n in readers}
    c.other = other.node_id
    yield c
    ray.shutdown()
    c.shutdown()


# ------------------------------------------------------------------ jobs for fault injection (sent by value)

MARK = ""  # set by the test; sent with die_once (this module is pickled by value)


def die_once(job):
    """Kills its worker the first time it meets step_1's actor_update (the marker file says it did)."""
    if "step_1" in job.target and "actor_update" in job.target:
        try:
            os.close(os.open(MARK, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            os._exit(1)
    return compare_pair(job)


def always_die(job):
    if "step_2" in job.target and "ref_compute_log_prob" in job.target:
        os._exit(1)
    return compare_pair(job)


def raises(job):
    if "step_2" in job.target and "ref_compute_log_prob" in job.target:
        raise RuntimeError("injected on a Ray node")
    return compare_pair(job)


def file_size(path):
    return {"size": os.path.getsize(path), "where": ray.get_runtime_context().get_node_id()}


# ------------------------------------------------------------------ tests

def test_ray_agrees_with_the_local_pool_and_uses_readable_nodes_only(runs, cluster, tmp_path):
    seen = []
    local = compare_runs(str(runs / "scaled"), str(runs / "golden"), CompareOptions(out_dir=str(tmp_path / "local"),
                         jobs=2, msprobe_csv="diverged"))
    remote = compare_runs(str(runs / "scaled"), str(runs / "golden"), CompareOptions(out_dir=str(tmp_path / "ray"),
                          ray=cluster.address, ray_resource="dumps", msprobe_csv="diverged"),
                          progress=lambda d, t: seen.append((d, t)))
    assert remote.exit_code == local.exit_code == ExitCode.DIVERGED and len(remote.pairs) == 6
    assert [(p.label, p.status, p.analysis.first.name, p.analysis.n_nodes) for p in remote.pairs] == \
        [(p.label, p.status, p.analysis.first.name, p.analysis.n_nodes) for p in local.pairs]
    assert {p.analysis.first.name for p in remote.pairs} == {FIRST}
    # every pair ran on a node with the resource, never on the other one; both readers got work
    ran = {p.ran_on for p in remote.pairs}
    assert ran <= cluster.readers and cluster.other not in ran
    assert seen[0] == (0, 6) and seen[-1] == (6, 6) and [d for d, _ in seen] == sorted(d for d, _ in seen)
    # the driver wrote the outputs: a summary per pair, and the diverged pairs' msprobe CSVs the workers sent
    # back, the same bytes as msprobe wrote locally
    for p in remote.pairs:
        assert Path(p.result_file).is_file() and Path(p.result_file).parent == Path(p.out_dir)
        summary = json.loads((Path(p.out_dir) / "summary.json").read_text())
        assert summary["first_divergence"]["name"] == FIRST and summary["ran_on"] == p.ran_on
        assert summary["layers"] and sum(lay["nodes"] for lay in summary["layers"]) == summary["nodes"]
        twin = next(q for q in local.pairs if q.label == p.label)
        assert Path(p.result_file).read_bytes() == Path(twin.result_file).read_bytes()
    assert json.loads((tmp_path / "ray" / "summary.json").read_text())["exit_code"] == ExitCode.DIVERGED


def test_a_worker_that_dies_is_tried_again(runs, cluster, tmp_path, monkeypatch):
    monkeypatch.setitem(globals(), "MARK", str(tmp_path / "died"))
    cmp = compare_runs(str(runs / "scaled"), str(runs / "golden"), CompareOptions(out_dir=str(tmp_path / "o"),
                       ray=cluster.address, ray_resource="dumps"), job_fn=die_once)
    assert (tmp_path / "died").exists()  # a worker did die
    assert [p.status for p in cmp.pairs] == ["diverged"] * 6
    assert {p.analysis.first.name for p in cmp.pairs} == {FIRST}


def test_a_worker_that_always_dies_fails_its_pair_alone(runs, cluster, tmp_path):
    cmp = compare_runs(str(runs / "scaled"), str(runs / "golden"), CompareOptions(out_dir=str(tmp_path),
                       ray=cluster.address, ray_resource="dumps"), job_fn=always_die)
    by = {(p.step, p.stage): p for p in cmp.pairs}
    bad = by[(2, "ref_compute_log_prob")]
    (f,) = bad.findings
    assert bad.status == "error" and "compare worker died on Ray node" in f.message and "2 tries" in f.message
    assert [p.status for p in cmp.pairs if p is not bad] == ["diverged"] * 5
    assert cmp.exit_code == ExitCode.ERROR  # the pair lost may hold a divergence: never "diverged"


def test_a_job_that_raises_fails_its_pair_alone_at_once(runs, cluster, tmp_path):
    """A job that raises would raise again anywhere: not retried; its pair is `error` with the exception, and
    the exit code is the error code, not "diverged"."""
    cmp = compare_runs(str(runs / "scaled"), str(runs / "golden"), CompareOptions(ray=cluster.address,
                       ray_resource="dumps"), job_fn=raises)
    bad = next(p for p in cmp.pairs if (p.step, p.stage) == (2, "ref_compute_log_prob"))
    (f,) = bad.findings
    assert (bad.status, bad.reason, f.rule) == ("error", "compare-failed", "compare-failed")
    assert "RuntimeError: injected on a Ray node" in f.message and "tries" not in f.message, f.message
    assert [p.status for p in cmp.pairs if p is not bad] == ["diverged"] * 5 and cmp.exit_code == ExitCode.ERROR


def test_generic_job_and_unreadable_files(runs, cluster, tmp_path):
    """Any job function: here a file's size. A job whose file no node can read never runs."""
    dumps = sorted(str(p) for p in (runs / "golden").rglob("dump.json"))
    notes = []
    out = {i: (o, node, err) for i, o, node, err in run_ray(file_size, dumps + [str(tmp_path / "nowhere.json")],
                                                              lambda j: [j], cluster.address, "dumps", notes)}
    assert [out[i][0]["size"] for i in range(len(dumps))] == [os.path.getsize(p) for p in dumps]
    assert all(out[i][0]["where"] == out[i][1] and out[i][2] == "" for i in range(len(dumps)))
    assert {out[i][1] for i in range(len(dumps))} <= cluster.readers
    outcome, node, error = out[len(dumps)]
    assert outcome is None and node == "" and "no node of the Ray cluster can read" in error
    assert notes == []
    with pytest.raises(ClusterError, match="no alive node with a CPU with the resource 'gpu_dumps'"):
        list(run_ray(file_size, dumps, lambda j: [j], cluster.address, "gpu_dumps"))
    with pytest.raises(UsageError, match="gpu_dumps"):
        compare_runs(str(runs / "scaled"), str(runs / "golden"), CompareOptions(out_dir=str(tmp_path / "u"),
                     ray=cluster.address, ray_resource="gpu_dumps"))


def test_ranks_on_ray(ranked, cluster, tmp_path):
    """--ranks with --ray: rank1 against rank0 for each stage, on the nodes that read the dumps, with the
    same verdicts as the local pool; the driver writes the summaries."""
    local = compare_ranks(str(ranked), 0, CompareOptions(out_dir=str(tmp_path / "local"), jobs=1))
    remote = compare_ranks(str(ranked), 0, CompareOptions(out_dir=str(tmp_path / "ray"), ray=cluster.address,
                           ray_resource="dumps"))
    assert len(remote.pairs) == 3 and remote.reference_rank == 0
    assert all((p.target.rank_dir, p.golden.rank_dir) == ("rank1", "rank0") for p in remote.pairs)
    assert [(p.label, p.status, p.analysis.first and p.analysis.first.name) for p in remote.pairs] == \
        [(p.label, p.status, p.analysis.first and p.analysis.first.name) for p in local.pairs]
    assert {p.ran_on for p in remote.pairs} <= cluster.readers
    assert all((tmp_path / "ray").joinpath(*p.target.key, p.rank_label, "summary.json").is_file()
               for p in remote.pairs)
    assert json.loads((tmp_path / "ray" / "summary.json").read_text())["reference_rank"] == 0


def test_command_with_ray(runs, cluster, tmp_path):
    """The command joins the cluster by its address; without --ray it never imports ray."""
    argv = [str(runs / "scaled" / "step_1"), str(runs / "golden" / "step_1"), "--format", "json"]
    probe = ("import sys; from verl_pdbg_conf.compare.cli import main; code = main(sys.argv[1:]); "
             "sys.stderr.write('RAY %s' % ('ray' in sys.modules)); sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", probe, *argv, "-o", str(tmp_path / "a"), "--ray", cluster.address,
                           "--ray-resource", "dumps"], env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == ExitCode.DIVERGED, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert [p["first_divergence"]["name"] for p in doc["pairs"]] == [FIRST] * 3
    assert {p["ran_on"] for p in doc["pairs"]} <= cluster.readers and "RAY True" in proc.stderr
    proc = subprocess.run([sys.executable, "-c", probe, *argv, "-o", str(tmp_path / "b")],
                          env=ENV, capture_output=True, text=True, timeout=600)
    assert proc.returncode == ExitCode.DIVERGED and "RAY False" in proc.stderr, proc.stderr[-3000:]
    assert all(p["result_file"] is None and "ran_on" not in p for p in json.loads(proc.stdout)["pairs"])
    # no msprobe CSV unless asked; a bounded summary per pair and one for the whole
    assert not list((tmp_path / "b").rglob("*.csv")) and len(list((tmp_path / "b").rglob("summary.json"))) == 4


def test_rollout_on_ray(cluster, tmp_path):
    """--rollout with --ray: each step a pair job on the nodes that read its stage directories, with the local
    pool's verdicts; the driver writes each step's summary (examples/rollout, given a second step)."""
    import shutil

    from verl_pdbg_conf.compare.rollout.steps import compare_rollout

    pytest.importorskip("torch")
    root = tmp_path / "r"
    for step in ("step_1", "step_2"):
        shutil.copytree(REPO / "examples" / "rollout" / "step_1", root / step)
    local = compare_rollout(str(root), options=CompareOptions(jobs=1))
    remote = compare_rollout(str(root), options=CompareOptions(out_dir=str(tmp_path / "o"), ray=cluster.address,
                                                               ray_resource="dumps"))
    assert [(p.label, p.status, p.analysis.first.module, p.analysis.first.position) for p in remote.pairs] == \
        [(p.label, p.status, p.analysis.first.module, p.analysis.first.position) for p in local.pairs]
    assert [p.status for p in remote.pairs] == ["diverged"] * 2 and remote.exit_code == ExitCode.DIVERGED
    assert {p.ran_on for p in remote.pairs} <= cluster.readers and all(p.ran_on for p in remote.pairs)
    for p in remote.pairs:
        summary = json.loads((tmp_path / "o" / p.name / "summary.json").read_text())
        assert summary["ran_on"] == p.ran_on and summary["first_divergence"]["module"] == p.analysis.first.module
