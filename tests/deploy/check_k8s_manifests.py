#!/usr/bin/env python3
"""Checks deploy/k8s/ (and deploy/k8s/cluster/): every manifest parses; each
flag a Deployment or StatefulSet passes to sgemm-server is one that
`sgemm-server --help` lists; the probes, GPU, /dev/shm, non-root user and
Services are as docs/server.md describes; a Prometheus annotation names the
--metrics-listen port; a memory limit comes with --host-memory-bytes and
--region-bytes under it; rotated logs fit their volume; a
StatefulSet's serviceName is a headless Service of the same manifests
(docs/cluster.md). A LeaderWorkerSet's pod templates get the same checks;
they pass no --cluster-listen or --join (the LWS_* variables choose the
role), offer the cluster port members join, and make groups of two or more.

    check_k8s_manifests.py DEPLOY_K8S_DIR SGEMM_SERVER_BIN
"""

import pathlib
import re
import subprocess
import sys

import yaml

HEALTH_SERVICE = "sgemm.v1.Sgemm"
errors = []


def check(ok, what):
    if not ok:
        errors.append(what)
    return ok


def server_flags(binary):
    run = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    if run.returncode != 0:
        sys.exit(f"{binary} --help exited {run.returncode}:\n{run.stdout}{run.stderr}")
    return set(re.findall(r"(--[a-z0-9][a-z0-9-]*)", run.stdout))


def quantity(text):
    """A Kubernetes quantity ("64Gi", "2G", "1048576") in bytes."""
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "k": 10**3, "M": 10**6, "G": 10**9,
             "T": 10**12}
    m = re.fullmatch(r"(\d+)([KMGT]i|[kMGT])?", str(text))
    if not m:
        errors.append(f"cannot read the quantity {text!r}")
        return 0
    return int(m.group(1)) * units.get(m.group(2) or "", 1)


def flag_int(args, flag):
    for a in args:
        if a.startswith(flag + "="):
            return int(a.split("=", 1)[1])
    return None


# The leader's cluster port (server/app/cluster_env.h: kLwsClusterPort) and
# the labels the LWS controller puts on every pod of a set (and the leader's index).
LWS_CLUSTER_PORT = 50052
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"


def check_deployment(path, d, flags):
    spec = d["spec"]
    labels = spec["template"]["metadata"].get("labels", {})
    for k, v in spec["selector"]["matchLabels"].items():
        check(labels.get(k) == v, f"{path}: selector {k}={v} does not match the pod's labels")
    return check_pod(path, spec["template"], flags)


def check_leader_worker_set(path, d, flags):
    """Returns (labels, ports) of the leader's pods and of the workers'."""
    name = d["metadata"]["name"]
    lwt = d["spec"]["leaderWorkerTemplate"]
    check(int(lwt.get("size", 1)) >= 2, f"{path}: size {lwt.get('size', 1)}: a cluster needs a leader and a worker")
    found = []
    for role, pod in (("leader", lwt.get("leaderTemplate") or lwt["workerTemplate"]), ("worker", lwt["workerTemplate"])):
        where = f"{path} ({role} template)"
        labels, ports = check_pod(where, pod, flags)
        for c in pod["spec"]["containers"]:
            for a in (c.get("command") or [])[1:] + (c.get("args") or []):
                check(not str(a).startswith(("--cluster-listen", "--join")),
                      f"{where}: passes {a}: the LWS_* variables choose the role, a flag would override them")
            cports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            check(cports.get("cluster") == LWS_CLUSTER_PORT,
                  f"{where}: containerPort 'cluster' is not {LWS_CLUSTER_PORT}, the port members join")
        labels = dict(labels, **{LWS_NAME_LABEL: name})
        if role == "leader":
            labels[LWS_INDEX_LABEL] = "0"
        found.append((labels, ports))
    return found


def check_pod(path, pod, flags):
    labels = pod["metadata"].get("labels", {})
    ann = pod["metadata"].get("annotations", {})
    pspec = pod["spec"]
    check(pspec.get("securityContext", {}).get("runAsNonRoot") is True, f"{path}: runAsNonRoot is not true")
    check(pspec.get("securityContext", {}).get("runAsUser", 0) != 0, f"{path}: runAsUser is root")
    volumes = {v["name"]: v for v in pspec.get("volumes", [])}
    containers = [c for c in pspec["containers"] if "sgemm-server" in (c.get("command") or [c.get("image", "")])[0]]
    check(len(containers) == 1, f"{path}: expected one sgemm-server container")
    for c in containers:
        # Every --flag passed (command and args) must be one sgemm-server accepts.
        for token in (c.get("command") or [])[1:] + (c.get("args") or []):
            if isinstance(token, str) and token.startswith("--"):
                flag = token.split("=", 1)[0]
                check(flag in flags, f"{path}: {c['name']} passes {flag}, which `sgemm-server --help` lacks")
        args = c.get("args") or []
        listen = [a.split("=", 1)[1] for a in args if a.startswith("--listen=")]
        grpc_port = int(listen[0].rsplit(":", 1)[1]) if listen else 50051
        ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
        check(ports.get("grpc") == grpc_port, f"{path}: containerPort 'grpc' is not the --listen port {grpc_port}")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            g = (c.get(probe) or {}).get("grpc")
            if check(g is not None, f"{path}: {probe} is not a native gRPC probe"):
                check(g.get("service") == HEALTH_SERVICE, f"{path}: {probe} does not name {HEALTH_SERVICE}")
                check(g.get("port") == grpc_port, f"{path}: {probe} port {g.get('port')} is not {grpc_port}")
        limits = c.get("resources", {}).get("limits", {})
        check(int(limits.get("nvidia.com/gpu", 0)) >= 1, f"{path}: no nvidia.com/gpu limit")
        # Prometheus is pointed only at a port the server listens on.
        metrics = [a.split("=", 1)[1] for a in args if a.startswith("--metrics-listen=")]
        if ann.get("prometheus.io/scrape") == "true" or "prometheus.io/port" in ann:
            if check(metrics, f"{path}: annotated for Prometheus, but no --metrics-listen: nobody listens there"):
                mport = metrics[0].rsplit(":", 1)[1]
                check(ann.get("prometheus.io/port") == mport,
                      f"{path}: prometheus.io/port {ann.get('prometheus.io/port')} is not --metrics-listen's {mport}")
                check(ports.get("metrics") == int(mport), f"{path}: containerPort 'metrics' is not {mport}")
        # A memory limit comes with budgets inside it (the server would take half and a quarter of it).
        if "memory" in limits:
            limit = quantity(limits["memory"])
            host = flag_int(args, "--host-memory-bytes")
            region = flag_int(args, "--region-bytes")
            if check(host is not None and region is not None,
                     f"{path}: memory limit {limits['memory']} without --host-memory-bytes and --region-bytes"):
                check(host + region < limit, f"{path}: --host-memory-bytes + --region-bytes ({host + region}) "
                      f"is not under the memory limit {limits['memory']} ({limit})")
        # Rotated logs fit their volume: sgemm-server.log and timings.jsonl, each (files + 1) x max bytes.
        log_dir = [a.split("=", 1)[1] for a in args if a.startswith("--log-dir=")]
        if log_dir:
            mounts = [m for m in c.get("volumeMounts", []) if m["mountPath"] == log_dir[0]]
            if check(mounts, f"{path}: --log-dir {log_dir[0]} is not a mounted volume (the root file system is "
                     "read-only)"):
                size = (volumes.get(mounts[0]["name"], {}).get("emptyDir") or {}).get("sizeLimit")
                if size:
                    most = 2 * ((flag_int(args, "--log-max-files") or 5) + 1) * (
                        flag_int(args, "--log-max-bytes") or 100 << 20)
                    check(most <= quantity(size), f"{path}: rotated logs may reach {most} bytes, over the "
                          f"{size} log volume (set --log-max-bytes / --log-max-files)")
        sec = c.get("securityContext", {})
        check(sec.get("allowPrivilegeEscalation") is False, f"{path}: allowPrivilegeEscalation is not false")
        shm = [m for m in c.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"]
        if check(len(shm) == 1, f"{path}: /dev/shm is not mounted"):
            vol = volumes.get(shm[0]["name"], {}).get("emptyDir", {})
            check(vol.get("medium") == "Memory" and vol.get("sizeLimit"),
                  f"{path}: /dev/shm is not a sized emptyDir in memory")
    return labels, {p.get("name") for c in containers for p in c.get("ports", [])}


def main():
    k8s_dir, binary = pathlib.Path(sys.argv[1]), sys.argv[2]
    flags = server_flags(binary)
    check("--listen" in flags, f"`{binary} --help` lists no --listen: cannot check flags against it")
    docs = []
    files = sorted(k8s_dir.glob("*.yaml")) + sorted(k8s_dir.glob("*.yml"))
    check(files, f"no manifests in {k8s_dir}")
    for f in files:
        try:
            for d in yaml.safe_load_all(f.read_text()):
                if d is not None:
                    docs.append((f.name, d))
        except yaml.YAMLError as e:
            errors.append(f"{f.name}: does not parse: {e}")
    workloads = []  # (labels, ports) of each Deployment / StatefulSet
    stateful = []
    services = []
    for name, d in docs:
        if not check(all(k in d for k in ("apiVersion", "kind")), f"{name}: lacks apiVersion or kind"):
            continue
        if d["kind"] == "Kustomization":
            for r in d.get("resources", []):
                check((k8s_dir / r).is_file(), f"{name}: resource {r} does not exist")
            listed = set(d.get("resources", []))
            for f in files:
                check(f.name == name or f.name in listed, f"{name}: does not list {f.name}")
            continue
        check(d.get("metadata", {}).get("name"), f"{name}: {d['kind']} has no metadata.name")
        if d["kind"] in ("Deployment", "StatefulSet"):
            workloads.append(check_deployment(name, d, flags))
            if d["kind"] == "StatefulSet":
                stateful.append((name, d))
        elif d["kind"] == "LeaderWorkerSet":
            workloads.extend(check_leader_worker_set(name, d, flags))
        elif d["kind"] == "Service":
            services.append((name, d))
    check(workloads, "no Deployment, StatefulSet or LeaderWorkerSet of sgemm-server")
    check(services, "no Service")
    for name, s in services:
        sel = s["spec"]["selector"]
        matched = [(labels, ports) for labels, ports in workloads if all(labels.get(k) == v for k, v in sel.items())]
        check(matched, f"{name}: selector {sel} matches no pod of the manifests")
        pod_ports = set().union(*(ports for _, ports in matched)) if matched else set()
        for p in s["spec"]["ports"]:
            t = p.get("targetPort", p["port"])
            check(not isinstance(t, str) or t in pod_ports, f"{name}: targetPort {t} is no container port")
    headless = {s["metadata"]["name"] for _, s in services if s["spec"].get("clusterIP") == "None"}
    for name, d in stateful:
        check(d["spec"].get("serviceName") in headless,
              f"{name}: serviceName {d['spec'].get('serviceName')} is no headless Service of these manifests")
    if errors:
        print("deploy/k8s check FAILED:\n  " + "\n  ".join(errors))
        sys.exit(1)
    print(f"deploy/k8s: {len(docs)} manifests in {len(files)} files parse; flags passed are all in "
          f"`sgemm-server --help` ({len(flags)} flags); probes name {HEALTH_SERVICE}")


if __name__ == "__main__":
    main()
