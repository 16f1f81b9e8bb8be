#!/usr/bin/env python3
"""Checks the Docker side of deploy/: the Dockerfile and every Compose file.

  - the Dockerfile's ENTRYPOINT is sgemm-server alone and its CMD holds only
    flags `sgemm-server --help` lists; LD_LIBRARY_PATH is appended to, never
    replaced; the HEALTHCHECK reads the port the server bound ($SGEMM_PORT_FILE)
    rather than a fixed one;
  - each Compose service of the image passes, in `command`, only flags (the
    ENTRYPOINT already is the binary), each one --help lists, none twice
    unless repeatable; a --log-dir is a named volume of the file (a bind mount
    is created root-owned and the image runs as uid 10001); published ports
    include the --listen port;
  - `docker compose config` (or Debian's docker-compose) accepts each file,
    where one is installed (skipped otherwise, and said so).

    check_compose.py REPO_ROOT SGEMM_SERVER_BIN
"""

import json
import pathlib
import re
import shutil
import subprocess
import sys

import yaml

REPEATABLE = {"--listen", "--grpc-arg"}
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


def check_flags(where, tokens, flags):
    """Every token a --flag[=value] or the value after one; each flag known, none twice unless repeatable."""
    seen = {}
    expect_value = False
    for t in tokens:
        if not isinstance(t, str):
            errors.append(f"{where}: {t!r} is not a string")
            continue
        if t.startswith("--"):
            flag = t.split("=", 1)[0]
            check(flag in flags, f"{where}: passes {flag}, which `sgemm-server --help` lacks")
            seen[flag] = seen.get(flag, 0) + 1
            expect_value = "=" not in t
        elif expect_value:
            expect_value = False
        else:
            errors.append(f"{where}: {t!r} is not a flag: the image's ENTRYPOINT already is sgemm-server, "
                          "so `command` holds flags only")
    for flag, n in seen.items():
        check(n == 1 or flag in REPEATABLE, f"{where}: {flag} given {n} times")
    return seen


def value_of(tokens, flag):
    for i, t in enumerate(tokens):
        if t == flag and i + 1 < len(tokens):
            return tokens[i + 1]
        if t.startswith(flag + "="):
            return t.split("=", 1)[1]
    return None


def dockerfile_instructions(path):
    """(INSTRUCTION, argument text) pairs, continuation lines joined."""
    out, cur = [], ""
    for line in path.read_text().splitlines():
        if not cur and (not line.strip() or line.lstrip().startswith("#")):
            continue
        cur += line.rstrip("\\").strip() + " " if line.rstrip().endswith("\\") else line.strip()
        if not line.rstrip().endswith("\\"):
            word, _, rest = cur.partition(" ")
            out.append((word.upper(), rest.strip()))
            cur = ""
    return out


def check_dockerfile(path, flags):
    ins = dockerfile_instructions(path)
    final = ins[max(i for i, (w, _) in enumerate(ins) if w == "FROM"):]  # the runtime stage
    entry = [json.loads(a) for w, a in final if w == "ENTRYPOINT"]
    check(entry == [["sgemm-server"]], f"{path.name}: ENTRYPOINT is {entry}, not [\"sgemm-server\"] alone")
    cmd = [json.loads(a) for w, a in final if w == "CMD"]
    if check(len(cmd) == 1, f"{path.name}: expected one CMD (the default flags)"):
        check_flags(f"{path.name} CMD", cmd[0], flags)
    envs = " ".join(a for w, a in final if w == "ENV")
    m = re.search(r"LD_LIBRARY_PATH=(\S+)", envs)
    if m:
        check("${LD_LIBRARY_PATH" in m.group(1) or "$LD_LIBRARY_PATH" in m.group(1),
              f"{path.name}: LD_LIBRARY_PATH={m.group(1)} replaces the base image's path instead of appending")
    health = [a for w, a in final if w == "HEALTHCHECK"]
    if check(len(health) == 1, f"{path.name}: no HEALTHCHECK"):
        check(not re.search(r":\d{2,5}\b", health[0].split("CMD", 1)[-1]),
              f"{path.name}: the HEALTHCHECK names a fixed port: {health[0]}")
        check("SGEMM_PORT_FILE" in health[0] and "SGEMM_PORT_FILE=" in envs,
              f"{path.name}: the HEALTHCHECK does not read the bound port from $SGEMM_PORT_FILE")
    users = [a for w, a in final if w == "USER"]
    check(users and users[-1] not in ("root", "0"), f"{path.name}: the runtime stage runs as root")


def check_compose(path, flags):
    doc = yaml.safe_load(path.read_text())
    named = set((doc.get("volumes") or {}).keys())
    services = doc.get("services") or {}
    check(services, f"{path.name}: no services")
    for name, svc in services.items():
        where = f"{path.name} {name}"
        if "sgemm-server" not in str(svc.get("image", "")):
            continue
        check("entrypoint" not in svc, f"{where}: overrides the image's ENTRYPOINT")
        cmd = svc.get("command")
        if not check(isinstance(cmd, list), f"{where}: `command` is not a list of flags"):
            continue
        check_flags(where, cmd, flags)
        log_dir = value_of(cmd, "--log-dir")
        for v in svc.get("volumes") or []:
            src, _, dst = (v.partition(":") if isinstance(v, str) else (v.get("source", ""), ":", v.get("target")))
            dst = dst.split(":")[0]
            if log_dir and dst == log_dir:
                check(src in named, f"{where}: --log-dir {log_dir} is mounted from {src!r}, not a named volume "
                      "(a bind mount is created root-owned; the image runs as uid 10001)")
        if log_dir:
            check(any((v if isinstance(v, str) else v.get("target", "")).split(":")[1 if isinstance(v, str) else 0]
                      == log_dir for v in svc.get("volumes") or []),
                  f"{where}: --log-dir {log_dir} is not a volume (the image's directory is lost with the container)")
        listen = value_of(cmd, "--listen")
        ports = [str(p) for p in svc.get("ports") or []]
        if listen and ports:
            port = listen.rsplit(":", 1)[1]
            check(any(p.endswith(":" + port) or p == port for p in ports),
                  f"{where}: publishes {ports}, not the --listen port {port}")
        metrics = value_of(cmd, "--metrics-listen")
        if metrics and ports:
            port = metrics.rsplit(":", 1)[1]
            check(any(p.endswith(":" + port) for p in ports), f"{where}: --metrics-listen port {port} is not published")


def docker_compose_config(files):
    """`docker compose config` (the v2 plugin), else `docker-compose config` (v1, Debian's docker-compose):
    both validate a file against the Compose schema without a Docker daemon."""
    commands = []
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        commands.append([docker, "compose"])
    if shutil.which("docker-compose"):
        commands.append([shutil.which("docker-compose")])
    if not commands:
        return "skipped `docker compose config`: neither the docker compose plugin nor docker-compose is installed"
    tool = commands[0]
    for f in files:
        run = subprocess.run(tool + ["-f", str(f), "config", "--quiet"], capture_output=True, text=True)
        check(run.returncode == 0, f"{f.name}: `{' '.join(tool)} config` failed: {run.stderr.strip()}")
    return f"`{' '.join(pathlib.Path(t).name for t in tool)} config` accepts {len(files)} files"


def main():
    root, binary = pathlib.Path(sys.argv[1]), sys.argv[2]
    flags = server_flags(binary)
    check("--listen" in flags, f"`{binary} --help` lists no --listen: cannot check flags against it")
    check_dockerfile(root / "Dockerfile", flags)
    files = sorted((root / "deploy").glob("compose*.yaml"))
    check(files, "no deploy/compose*.yaml")
    for f in files:
        try:
            check_compose(f, flags)
        except yaml.YAMLError as e:
            errors.append(f"{f.name}: does not parse: {e}")
    note = docker_compose_config(files)
    if errors:
        print("Dockerfile / Compose check FAILED:\n  " + "\n  ".join(errors))
        sys.exit(1)
    print(f"Dockerfile and {len(files)} Compose files: flags all in `sgemm-server --help`; {note}")


if __name__ == "__main__":
    main()
