"""Test support: a real, private Slurm cluster (munged, slurmctld, several slurmd) in a temp dir.

The Slurm actuator's integration tests run against it. Everything lives under one directory
(configs, munge key and socket, state, logs), the ports are free ones, so it does not clash with
another cluster on the machine. Pools are partitions; each node has fake GPUs (gres File= points
at symlinks to /dev/null, which Slurm accepts as devices).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from daemons import stop_daemon

REPO_ROOT = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install_slurm.sh"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _free_port_range(count: int) -> int:
    """A start port such that start..start+count-1 all look free."""
    for _ in range(50):
        start = _free_port()
        if start + count > 65000:
            continue
        ok = True
        for port in range(start, start + count):
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return start
    raise RuntimeError("no free port range for slurmd nodes")


def install_slurm() -> str | None:
    """Run the install script; return None when Slurm is usable, else why not."""
    try:
        proc = subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scripts/install_slurm.sh could not run: {exc}"
    if proc.returncode != 0:
        return f"scripts/install_slurm.sh failed (rc {proc.returncode}): {proc.stderr.strip()[-400:]}"
    return None


@dataclass
class SlurmCluster:
    """A running private Slurm cluster. ``pools`` maps partition name to its node names."""

    root: Path
    pools: dict[str, list[str]]
    gpus_per_node: int = 8
    ctld_port: int = 0
    accounting: bool = False
    """Keep accounting (sacct) in slurmdbd over a private MariaDB (``start_accounting``)."""
    dbd_port: int = 0
    db_port: int = 0
    min_job_age_s: int = 300
    """How long slurmctld (and so squeue) keeps an ended job."""
    multifactor: bool = False
    """Slurm's multifactor priority (age and nice only: every other weight 0) with a backfill pass
    every second (its default resolution, 60 s), for the scheduler fidelity bench; off (the default):
    priority/basic (first in, first out) and the backfill plugin's defaults."""
    clock_speedup: int = 1
    """Above 1: slurmctld and slurmd run on one shared clock that runs this many times faster
    than the wall (libfaketime, ``faketime -f '+0 xN'``), so a job's time limit in whole minutes
    matches a run compressed in real time; their timeouts and MinJobAge are scaled to match.
    Commands (sbatch, squeue) and job scripts keep the real clock."""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    fast_clock_env: dict[str, str] = field(default_factory=dict)
    """libfaketime's variables of the shared fast clock, once ``start_fast_clock`` has run."""

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def write_config(self) -> None:
        host = socket.gethostname()
        etc = self.root / "etc"
        for sub in ("etc", "state", "log", "run", "munge", "dev"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        for index in range(self.gpus_per_node):
            link = self.root / "dev" / f"nvidia{index}"
            if not link.exists():
                link.symlink_to("/dev/null")
        shutil.copy("/etc/munge/munge.key", self.root / "munge" / "munge.key")
        os.chmod(self.root / "munge" / "munge.key", 0o600)
        self.ctld_port = _free_port()
        nodes = [n for names in self.pools.values() for n in names]
        first_port = _free_port_range(len(nodes))
        gpu_files = f"{self.root}/dev/nvidia[0-{self.gpus_per_node - 1}]"
        lines = [
            "ClusterName=ebbtide-test",
            f"SlurmctldHost={host}",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"AuthInfo=socket={self.root}/munge/munge.sock",
            "AuthAltTypes=auth/jwt",
            f"AuthAltParameters=jwt_key={self.root}/etc/jwt.key",
            f"StateSaveLocation={self.root}/state",
            f"SlurmdSpoolDir={self.root}/state/slurmd-%n",
            f"SlurmctldPidFile={self.root}/run/slurmctld.pid",
            f"SlurmdPidFile={self.root}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={self.root}/log/slurmctld.log",
            f"SlurmdLogFile={self.root}/log/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            *self._accounting_lines(host),
            "JobCompType=jobcomp/none",
            "SchedulerType=sched/backfill",
            *self._priority_lines(),
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "ReturnToService=2",
            "JobRequeue=1",
            "MpiDefault=none",
            "SlurmctldTimeout=30",
            f"SlurmdTimeout={60 * self.clock_speedup}",
            f"MessageTimeout={10 * self.clock_speedup}",
            f"MinJobAge={self.min_job_age_s * self.clock_speedup}",
            "KillWait=2",
            "SlurmdParameters=config_overrides",
        ]
        gres_lines = ["AutoDetect=off"]
        port = first_port
        for pool, names in self.pools.items():
            for name in names:
                lines.append(
                    f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} "
                    f"CPUs=16 RealMemory=4000 Gres=gpu:fake:{self.gpus_per_node} State=UNKNOWN"
                )
                gres_lines.append(f"NodeName={name} Name=gpu Type=fake File={gpu_files}")
                port += 1
            lines.append(f"PartitionName={pool} Nodes={','.join(names)} MaxTime=INFINITE State=UP")
        (etc / "slurm.conf").write_text("\n".join(lines) + "\n")
        (etc / "gres.conf").write_text("\n".join(gres_lines) + "\n")
        jwt = etc / "jwt.key"
        if not jwt.exists():
            jwt.write_bytes(os.urandom(32))
            os.chmod(jwt, 0o600)

    def _priority_lines(self) -> list[str]:
        if not self.multifactor:
            return ["SchedulerParameters=sched_interval=2"]
        return [
            "SchedulerParameters=sched_interval=2,bf_interval=1",
            "PriorityType=priority/multifactor",
            "PriorityWeightAge=100",
            "PriorityMaxAge=7-0",
            "PriorityWeightPartition=1000",  # one partition, factor 1: every job starts at 1000
            "PriorityWeightFairshare=0",
            "PriorityWeightJobSize=0",
            "PriorityWeightQOS=0",
            "PriorityWeightAssoc=0",
            "OverTimeLimit=1",  # a job that runs exactly its limit (plus launch latency) is not killed
        ]

    def _accounting_lines(self, host: str) -> list[str]:
        if not self.accounting:
            return ["AccountingStorageType=accounting_storage/none"]
        self.dbd_port, self.db_port = _free_port(), _free_port()
        dbd = [
            "AuthType=auth/munge",
            f"AuthInfo=socket={self.root}/munge/munge.sock",
            f"DbdHost={host}",
            f"DbdPort={self.dbd_port}",
            "SlurmUser=root",
            f"LogFile={self.root}/log/slurmdbd.log",
            f"PidFile={self.root}/run/slurmdbd.pid",
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={self.db_port}",
            "StorageUser=slurm",
            "StoragePass=ebbtide-test",
            "StorageLoc=slurm_acct_db",
        ]
        path = self.root / "etc" / "slurmdbd.conf"
        path.write_text("\n".join(dbd) + "\n")
        os.chmod(path, 0o600)
        return [
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={host}",
            f"AccountingStoragePort={self.dbd_port}",
            f"AccountingStoragePass={self.root}/munge/munge.sock",  # the munge socket, for slurmdbd
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStoreFlags=job_comment",  # sacct shows the comment (the ebbtide spec)
            "AccountingStorageTRES=gres/gpu",
        ]

    def start_accounting(self) -> None:
        """A private MariaDB (its own data dir and port) and slurmdbd on it, the cluster registered."""
        data, sock = self.root / "mariadb", self.root / "run" / "mariadb.sock"
        install = ["mariadb-install-db", f"--datadir={data}", "--user=root", "--skip-test-db",
                   "--auth-root-authentication-method=normal"]  # fmt: skip
        subprocess.run(install, capture_output=True, check=True, timeout=120)
        daemon = ["mariadbd", f"--datadir={data}", f"--socket={sock}", f"--port={self.db_port}",
                  "--bind-address=127.0.0.1", "--user=root", "--skip-log-bin",
                  f"--pid-file={self.root}/run/mariadb.pid", "--innodb-buffer-pool-size=16M"]  # fmt: skip
        self._spawn("mariadbd", daemon)
        sql = ("CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'ebbtide-test'; "
               "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;")  # fmt: skip
        self._wait(lambda: subprocess.run(["mariadb", f"--socket={sock}", "-uroot", "-e", sql],
                                          capture_output=True).returncode == 0, 60, "mariadb")  # fmt: skip
        self._spawn("slurmdbd", ["slurmdbd", "-D"])
        self._wait(lambda: self.run("sacctmgr", "-n", "list", "cluster", check=False).returncode == 0, 60,
                   "slurmdbd")  # fmt: skip
        self.run("sacctmgr", "-i", "add", "cluster", "ebbtide-test")

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 (kept open with the process)
        self.processes[name] = subprocess.Popen(
            argv, env=env or self.env, stdout=log, stderr=subprocess.STDOUT
        )

    def start_fast_clock(self) -> None:
        """A process holding libfaketime's shared clock (``faketime`` keeps it while it lives); the
        daemons started after it join that clock through its environment."""
        if shutil.which("faketime") is None:
            raise RuntimeError("clock_speedup needs faketime (scripts/build_slurmsched.sh installs it)")
        saved = self.root / "run" / "faketime.env"
        script = (
            f"echo $$ > {saved}.pid && env > {saved}.tmp && mv {saved}.tmp {saved} && exec sleep 1000000000"
        )
        self._spawn("faketime", ["faketime", "-f", f"+0 x{self.clock_speedup}", "sh", "-c", script])
        self._wait(saved.exists, 10, "the faketime clock")
        keys = ("LD_PRELOAD", "FAKETIME", "FAKETIME_SHARED")
        shared = dict(line.split("=", 1) for line in saved.read_text().splitlines() if "=" in line)
        self.fast_clock_env = {k: shared[k] for k in keys}

    @property
    def clock_env(self) -> dict[str, str]:
        """The environment of slurmctld and slurmd: on the fast clock where one was started."""
        return {**self.env, **self.fast_clock_env}

    def start_munge(self) -> None:
        m = self.root / "munge"
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--key-file={m}/munge.key",
                f"--socket={m}/munge.sock",
                f"--pid-file={m}/munged.pid",
                f"--log-file={m}/munged.log",
                f"--seed-file={m}/munged.seed",
            ],
        )
        self._wait(lambda: (m / "munge.sock").exists(), 10, "munged socket")

    def start_ctld(self) -> None:
        self._spawn("slurmctld", ["slurmctld", "-D", "-i"], self.clock_env)
        self._wait(self.ctld_answers, 20, "slurmctld")

    def stop_ctld(self) -> None:
        self._stop("slurmctld")

    def start_nodes(self) -> None:
        for names in self.pools.values():
            for name in names:
                (self.root / "state" / f"slurmd-{name}").mkdir(parents=True, exist_ok=True)
                self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name], self.clock_env)
        self._wait(self.all_nodes_idle, 30, "slurmd nodes idle")

    def start(self) -> None:
        self.write_config()
        self.start_munge()
        if self.clock_speedup > 1:
            self.start_fast_clock()
        if self.accounting:
            self.start_accounting()
        self.start_ctld()
        self.start_nodes()

    def stop(self) -> None:
        """Cancel every job, stop the daemons, then end any job process they left behind."""
        if "slurmctld" in self.processes:
            ids = self.run("squeue", "-h", "-o", "%i", check=False).stdout.split()
            if ids:
                self.run("scancel", "--full", *ids, check=False)
                deadline = time.monotonic() + 10
                while (
                    time.monotonic() < deadline and self.run("squeue", "-h", "-t", "R,CG", check=False).stdout
                ):
                    time.sleep(0.2)
        for name in reversed(list(self.processes)):
            self._stop(name)
        self._kill_leftover_jobs()

    def _kill_leftover_jobs(self) -> None:
        """Job shells outlive slurmd; ours run scripts under this cluster's private directory."""
        marker = str(self.root)
        for proc_dir in Path("/proc").iterdir():
            if not proc_dir.name.isdigit():
                continue
            try:
                cmdline = (proc_dir / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                with contextlib.suppress(OSError):
                    os.kill(int(proc_dir.name), signal.SIGKILL)

    def _stop(self, name: str) -> None:
        holder = self.root / "run" / "faketime.env.pid"
        if name == "faketime" and holder.exists():
            # faketime does not pass SIGTERM on to the command it runs: end that command, and
            # faketime exits by itself, removing its shared clock from /dev/shm.
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(holder.read_text()), signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.processes[name].wait(timeout=5)
        stop_daemon(self.processes, name, timeout_s=10)

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=30, check=check
        )

    def ctld_answers(self) -> bool:
        return self.run("scontrol", "ping", check=False).stdout.count("UP") >= 1

    def all_nodes_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False).stdout.split("\n")
        states = [line.split()[1] for line in out if line.strip()]
        expected = sum(len(v) for v in self.pools.values())
        return len(states) >= expected and all(s.startswith("idle") for s in states)

    @staticmethod
    def _wait(predicate: object, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():  # type: ignore[operator]
                return
            time.sleep(0.1)
        raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")

    def checkpoint_marker(self, job_name: str) -> Path:
        """The file a test job writes when it receives its checkpoint signal (SIGUSR1)."""
        return self.root / "markers" / f"{job_name}.checkpointed"

    def start_rest(self, user: str = "daemon", api: str = "v0.0.38") -> tuple[str, str]:
        """Start slurmrestd (JWT auth, as ``nobody``); return its URL and a token for ``user``."""
        for path in (self.root, self.root / "etc"):
            os.chmod(path, 0o755)
        for name in ("slurm.conf", "gres.conf"):
            os.chmod(self.root / "etc" / name, 0o644)
        port = _free_port()
        log = open(self.root / "log" / "slurmrestd.out", "ab")  # noqa: SIM115 (kept open with the process)
        self.processes["slurmrestd"] = subprocess.Popen(
            [
                "runuser",
                "-u",
                "nobody",
                "--",
                "slurmrestd",
                "-f",
                str(self.conf),
                "-a",
                "rest_auth/jwt",
                "-s",
                f"openapi/{api}",
                f"127.0.0.1:{port}",
            ],
            env={**self.env, "SLURM_JWT": "daemon"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        self._wait(listening, 10, "slurmrestd")
        token = self.run("scontrol", "token", f"username={user}", "lifespan=3600").stdout.strip()
        return f"http://127.0.0.1:{port}", token.split("=", 1)[1]

    def submit(
        self,
        name: str,
        partition: str,
        gpus: int,
        hold: bool = True,
        requeue: bool = True,
        user: str | None = None,
        comment: str | None = None,
        run_s: float | None = None,
        time_limit_min: int | None = None,
    ) -> int:
        """Submit a batch job that traps SIGUSR1 as its checkpoint signal (and runs until cancelled,
        or ``run_s`` seconds; Slurm's time limit ``time_limit_min``, else the partition's);
        return its Slurm id."""
        marker = self.checkpoint_marker(name)
        marker.parent.mkdir(mode=0o777, exist_ok=True)
        os.chmod(marker.parent, 0o777)  # jobs of other users write there too
        work = f"sleep {run_s}" if run_s is not None else "while true; do sleep 0.2; done"
        script = f"trap 'echo done > {marker}' USR1; {work}"
        argv = [
            "sbatch",
            "--parsable",
            "-J",
            name,
            "-p",
            partition,
            f"--gres=gpu:{gpus}",
            "-n",
            "1",
            "-o",
            "/dev/null",
            "--wrap",
            script,
        ]
        if hold:
            argv.insert(1, "--hold")
        if comment is not None:
            argv.insert(1, f"--comment={comment}")
        if requeue:
            argv.insert(1, "--requeue")
        if time_limit_min is not None:
            argv.insert(1, f"--time={time_limit_min}")
        if user is not None:
            argv = ["runuser", "-u", user, "--", *argv, "--chdir=/tmp"]
        return int(self.run(*argv).stdout.strip().split(";")[0])
