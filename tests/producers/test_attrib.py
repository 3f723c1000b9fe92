"""Attribution on fixture /proc trees: docker, Kubernetes (both cgroup drivers), Slurm (v1, v2), plain."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwarden.producers.attrib import Attributor, command_label, parse_cgroup, pod_owner

ROOT = Path(__file__).parent.parent / "fixtures" / "proc"
CID = "4f1c2b3a" * 8
POD = "2f5a1e7c-0d3b-4c8e-9a61-7b2e5c9d1f04"


def attr(tree: str, pid: int):
    return Attributor(ROOT / tree)(pid)


@pytest.mark.parametrize("tree,pid", [("docker-cgroupfs", 4101), ("docker-systemd-v2", 4102)])
def test_docker_container_id_both_drivers(tree, pid):
    a = attr(tree, pid)
    assert a.container_id == CID and a.pod_uid is None and a.slurm_job_id is None
    assert a.uid == 0 and a.user == "root"


def test_docker_task_label_falls_back_to_script_name():
    assert attr("docker-cgroupfs", 4101).task == "serve.py"
    assert attr("docker-systemd-v2", 4102).task == "train_gpt.py"
    assert attr("docker-cgroupfs", 4101).task_id == "pid-4101"


@pytest.mark.parametrize("tree,pid,owner,ns", [
    ("k8s-cgroupfs", 4201, "vllm-serve", "serving"),
    ("k8s-systemd", 4202, "trainer", "research"),
])
def test_kubernetes_pod_uid_container_and_owner(tree, pid, owner, ns):
    a = attr(tree, pid)
    assert a.pod_uid == POD and a.container_id == CID
    assert a.task == owner and a.pod_namespace == ns and a.task_id == a.pod_name


def test_cri_o_and_explicit_task_label_win():
    a = attr("k8s-crio", 4203)
    assert a.container_id == CID and a.pod_uid == POD
    assert a.task == "embedding-batch" and a.project == "search"


def test_slurm_cgroup_v1():
    a = attr("slurm-v1", 4301)
    assert a.slurm_job_id == "123456" and a.task == "llama-pretrain" and a.task_id == "slurm-123456"
    assert a.project == "foundation-models" and a.container_id is None


def test_slurm_cgroup_v2():
    a = attr("slurm-v2", 4302)
    assert a.slurm_job_id == "778899" and a.task == "bert-finetune"


def test_slurm_from_environment_and_explicit_task_id():
    a = attr("slurm-env-only", 4303)
    assert a.slurm_job_id == "55501" and a.task == "sd-finetune" and a.task_id == "sd-run-7"


def test_plain_process():
    a = attr("plain", 4401)
    assert (a.container_id, a.pod_uid, a.slurm_job_id) == (None, None, None)
    assert a.task == "notebook_kernel.py"
    assert a.command == "/home/alice/venv/bin/python3.11 -O /home/alice/notebook_kernel.py --port 9999"


def test_unreadable_entries_give_nulls_not_errors():
    a = attr("unreadable", 4501)
    assert a.uid == 0 and a.container_id is None and a.task is None and a.command is None
    gone = attr("plain", 999999)
    assert gone.uid is None and gone.task is None and gone.task_id is None


def test_cache_notices_pid_reuse(tmp_path):
    import shutil
    shutil.copytree(ROOT / "plain" / "4401", tmp_path / "4401")
    at = Attributor(tmp_path)
    assert at(4401).task == "notebook_kernel.py"
    (tmp_path / "4401" / "cmdline").write_bytes(b"python\0other.py\0")
    assert at(4401).task == "notebook_kernel.py"  # same process: cached
    stat = (tmp_path / "4401" / "stat").read_text().replace(" 123456 ", " 999999 ")
    (tmp_path / "4401" / "stat").write_text(stat)
    assert at(4401).task == "other.py"  # new start time: a new process


def test_pure_helpers():
    assert pod_owner("vllm-serve-7d9f8c6b5-x2k4p") == "vllm-serve"
    assert pod_owner("db-0") == "db"
    assert command_label(["/usr/bin/nvidia-cuda-mps-server"]) == "nvidia-cuda-mps-server"
    assert command_label([]) is None
    assert parse_cgroup("") == (None, None, None)
