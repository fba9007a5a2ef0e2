#!/usr/bin/env python3
"""Log where this machine's CPU goes while something else runs (a lab run, a benchmark).

    python3 tools/cpu_sample.py OUT.jsonl [--every 0.5]
    python3 tools/cpu_sample.py OUT.jsonl --windows LAB/data.json

Every interval, one JSON line: `wall` (seconds since the Unix epoch), `cpus` (the machine's), and `procs`, the CPU ms
spent since the line before, by process (Chromium's by role: chr-renderer, chr-gpu,
chr-utility, chr-browser; others by executable name), by thread for the renderer, the cloud
server and node (`chr-renderer|<thread name>`), and for the whole machine: `machine:busy`,
`machine:idle` (with iowait) and `machine:steal` (time the hypervisor gave the virtual CPUs to
someone else, where it says so). Stop it with Ctrl-C or kill.

The lab's trace runs record when each run's clock started (`origin` in data.json, ms since the
epoch), so a sample at trace time `t` lines up with the line whose `wall` is `(origin + t) / 1000`
(docs/perf-lab.md, "What ran in the slow windows"). With --windows the script reads a log it
wrote and a lab run's data.json and prints each trace run by 5 s windows: the median stage time
of the device's unpaused runs, the machine's busy and steal shares, and the busiest threads.
"""
import argparse
import json
import os
import time

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CPUS = os.cpu_count() or 1
BY_THREAD = ("chr-renderer", "cloud-server", "node")


def label(pid):
    try:
        raw = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if "split-browser" in raw or "chromium" in raw:
        if "--renderer-client-id" in raw or "--type=renderer" in raw:
            return "chr-renderer"
        if "--gpu-preferences" in raw or "--type=gpu" in raw:
            return "chr-gpu"
        if "--utility-sub-type" in raw or "--type=utility" in raw:
            return "chr-utility"
        return "chr-browser"
    return os.path.basename(raw.split(" ")[0]) or None


def ticks(stat_line):
    """utime + stime of a /proc/<pid>/stat line (fields after the command's closing paren)."""
    fields = stat_line[stat_line.rfind(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


def machine():
    v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return {"machine:busy": user + nice + system + irq + softirq, "machine:idle": idle + iowait,
            "machine:steal": steal}


def snapshot():
    """Counters now, in clock ticks, each with the label it adds to."""
    now = {k: (v, k) for k, v in machine().items()}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            now[pid] = (ticks(open(f"/proc/{pid}/stat").read()), None)
        except OSError:
            continue
        name = label(pid) or "?"
        now[pid] = (now[pid][0], name)
        if name not in BY_THREAD:
            continue
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                s = open(f"/proc/{pid}/task/{tid}/stat").read()
                comm = s[s.find("(") + 1:s.rfind(")")]
                now[f"{pid}/{tid}"] = (ticks(s), f"{name}|{comm}")
        except OSError:
            pass
    return now


def windows(log_path, data_path, width_s=5):
    lines = [json.loads(l) for l in open(log_path)]
    data = json.load(open(data_path))
    for link in data["results"]["browser"]["links"]:
        for run in link["runs"]:
            if run.get("origin") is None:
                continue
            print(f"== {link['link']} run {run['repeat'] + 1} {run['mode']}")
            origin_s = run["origin"] / 1000
            for start in range(0, int(run.get("duration_ms") or 60000) // 1000, width_s):
                spent = {}
                cpus = CPUS
                for line in lines:
                    if start <= line["wall"] - origin_s < start + width_s:
                        cpus = line.get("cpus", CPUS)  # logs from before the field: this machine's
                        for k, v in line["procs"].items():
                            spent[k] = spent.get(k, 0) + v
                stages = sorted(s["edge_stages"] for s in run["samples"]
                                if s.get("edge_stages") and not s.get("edge_paused")
                                and start * 1000 <= s["t"] < (start + width_s) * 1000)
                total = sum(spent.get(k, 0) for k in ("machine:busy", "machine:idle", "machine:steal"))
                if not total:
                    continue
                busiest = sorted(((v, k) for k, v in spent.items()
                                  if not k.startswith("machine:") and k not in BY_THREAD), reverse=True)[:4]
                median = f"{stages[len(stages) // 2]:5.0f} ms ({len(stages):2d})" if stages else "    – ms ( 0)"
                print(f"{start:3d} s  stages {median}  busy {100 * spent.get('machine:busy', 0) / total:3.0f}%"
                      f"  steal {100 * spent.get('machine:steal', 0) / total:4.1f}%  "
                      + "  ".join(f"{k} {100 * v / (total / cpus):.0f}%" for v, k in busiest))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="JSON lines file to write (to read, with --windows)")
    ap.add_argument("--every", type=float, default=0.5, help="seconds between lines")
    ap.add_argument("--windows", metavar="DATA_JSON", help="a lab run's data.json to line the log up with")
    a = ap.parse_args()
    if a.windows:
        return windows(a.out, a.windows)
    before = snapshot()
    with open(a.out, "w") as out:
        while True:
            time.sleep(a.every)
            now = snapshot()
            spent = {}
            for key, (value, name) in now.items():
                delta = value - before.get(key, (value, None))[0]
                if delta > 0:
                    spent[name] = spent.get(name, 0) + delta * 1000 / CLOCK_TICKS
            before = now
            out.write(json.dumps({"wall": round(time.time(), 3), "cpus": CPUS, "procs": spent}) + "\n")
            out.flush()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
