#!/usr/bin/env python3
"""Checks the documentation against the tree it describes.

    check_docs.py REPO_ROOT flags SGEMM_SERVER_BIN
        every flag docs/server.md names in its tables is one `sgemm-server --help`
        lists, and every flag --help lists has a row there
    check_docs.py REPO_ROOT client-flags SGEMM_CLIENT_BIN
        every flag `sgemm-client --help` and each subcommand's --help list
        appears in docs/clients.md
    check_docs.py REPO_ROOT links
        every relative link in README.md, CONTRIBUTING.md, CHANGELOG.md, docs/*.md and
        bench/results/INDEX.md names a file or folder that exists (links into
        bench/results/ are skipped where that folder is absent: the Docker build
        context leaves it out); every folder of bench/results is named
        YYYY-MM-DD_device_topic and has its line in INDEX.md
"""

import pathlib
import re
import subprocess
import sys

errors = []


def check_flags(root, binary):
    run = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    if run.returncode != 0:
        sys.exit(f"{binary} --help exited {run.returncode}:\n{run.stdout}{run.stderr}")
    helped = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", run.stdout)) - {"--help"}
    doc = (root / "docs/server.md").read_text()
    # The first cell of each table row names the flags the row documents.
    documented = set()
    for line in doc.splitlines():
        if line.startswith("| `--"):
            documented |= set(re.findall(r"`(--[a-z0-9][a-z0-9-]*)`", line.split("|")[1]))
    for flag in sorted(documented - helped):
        errors.append(f"docs/server.md documents {flag}, which `sgemm-server --help` lacks")
    for flag in sorted(helped - documented):
        errors.append(f"`sgemm-server --help` lists {flag}, which has no row in docs/server.md")
    print(f"docs/server.md: {len(documented)} flags, --help: {len(helped)}")


def check_client_flags(root, binary):
    top = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    if top.returncode != 0:
        sys.exit(f"{binary} --help exited {top.returncode}:\n{top.stdout}{top.stderr}")
    subcommands = re.findall(r"^  ([a-z]+)\s{2,}", top.stdout.split("Subcommands:", 1)[-1], flags=re.M)
    helped = set()
    for sub, text in [("", top.stdout)] + [(s, None) for s in subcommands]:
        if text is None:
            run = subprocess.run([binary, sub, "--help"], capture_output=True, text=True, timeout=30)
            if run.returncode != 0:
                errors.append(f"sgemm-client {sub} --help exited {run.returncode}")
                continue
            text = run.stdout
        # An option's own line starts with it; flags inside a description are not the client's.
        for line in text.splitlines():
            m = re.match(r"\s{2}(?:-\w,)?(--[a-z0-9][a-z0-9-]*)", line)
            if m and m.group(1) != "--help":
                helped.add(m.group(1))
    doc = (root / "docs/clients.md").read_text()
    documented = set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", doc))
    for flag in sorted(helped - documented):
        errors.append(f"`sgemm-client ... --help` lists {flag}, which docs/clients.md does not mention")
    print(f"sgemm-client: {len(subcommands)} subcommands, {len(helped)} flags")


def check_links(root):
    pages = [root / "README.md", root / "CONTRIBUTING.md", root / "CHANGELOG.md",
             root / "bench/results/INDEX.md"] + sorted((root / "docs").glob("*.md"))
    have_results = (root / "bench/results").is_dir()
    count = 0
    for page in pages:
        if not page.exists():
            if page.parent == root:
                errors.append(f"{page.relative_to(root)} is missing")
            continue
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code blocks hold no links
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL or an anchor in the same page
            path = (page.parent / target.split("#", 1)[0]).resolve()
            inside = path.relative_to(root.resolve()) if path.is_relative_to(root.resolve()) else None
            if not have_results and inside is not None and inside.parts[:2] == ("bench", "results"):
                continue
            count += 1
            if not path.exists():
                errors.append(f"{page.relative_to(root)}: link to {target}: no such file or folder")
    print(f"{count} links checked")
    if have_results:
        check_results_index(root)


def check_results_index(root):
    results = root / "bench/results"
    index = (results / "INDEX.md").read_text()
    folders = sorted(p.name for p in results.iterdir() if p.is_dir())
    for name in folders:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}_[a-z0-9]+_[a-z0-9][a-z0-9.-]*", name):
            errors.append(f"bench/results/{name}: not named YYYY-MM-DD_device_topic (lower case, '-' inside a part)")
        if f"]({name}/)" not in index:
            errors.append(f"bench/results/{name}: no line in bench/results/INDEX.md links it as ({name}/)")
    loose = sorted(p.name for p in results.iterdir() if p.is_file() and p.name != "INDEX.md")
    for name in loose:
        errors.append(f"bench/results/{name}: a result lives in a folder of its own")
    print(f"{len(folders)} result folders checked")


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    root = pathlib.Path(sys.argv[1])
    if sys.argv[2] == "flags" and len(sys.argv) == 4:
        check_flags(root, sys.argv[3])
    elif sys.argv[2] == "client-flags" and len(sys.argv) == 4:
        check_client_flags(root, sys.argv[3])
    elif sys.argv[2] == "links":
        check_links(root)
    else:
        sys.exit(__doc__)
    for e in errors:
        print("FAIL:", e)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
