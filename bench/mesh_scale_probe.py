#!/usr/bin/env python3
"""Measurement half of bench/mesh_scale.sh: reads the nodes' logs and /proc, signals the
kill and stall victims, prints one `key value` line per figure on stdout (progress goes to
stderr). Started by mesh_scale.sh, which owns (starts and reaps) every node process.

"In the view" is read from each node's own log (stderr, info level, synchronous and
flushed per line by Boost.Log): `connected to NAME incarnation I` when a peer's connection
is established and kept (Mesh::on_established, after the peer entered the peer table),
and `lost NAME: ...` when it leaves (Mesh::peer_lost, after it left the peer table and
every group). Replaying those lines gives each node's set of connected peers with the
node's own microsecond timestamps, at the cost of one log line per change: no extra
traffic on the mesh, no polling of the nodes. `--verify-admin` cross-checks the replayed
view against each node's `rpclb_peers_connected` and `rpclb_balancer_members` gauges
(GET /metrics on its admin port).

stdlib only."""

import argparse
import datetime
import http.client
import os
import re
import signal
import sys
import time

LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+) \w+ \[mesh\] "
                  r"(?:connected to (\S+)( \(client\))? incarnation|lost (\S+?):)")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"mesh_scale: {msg}", file=sys.stderr, flush=True)


_second_cache = {}


def parse_ts(text):
    # Boost.Log's TimeStamp is the local wall clock, as time.time() is once converted.
    # strptime once per distinct second: a churning mesh logs hundreds of thousands of lines.
    whole, _, frac = text.partition(".")
    base = _second_cache.get(whole)
    if base is None:
        base = datetime.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").timestamp()
        _second_cache[whole] = base
    return base + int(frac) / 10 ** len(frac)


class Node:
    def __init__(self, name, pid, err, out):
        self.name, self.pid, self.err_path, self.out_path = name, pid, err, out
        self.view = {}          # peer name -> timestamp it (last) connected
        self.lost_at = {}       # peer name -> timestamp it was (last) lost
        self.last_change = 0.0  # timestamp of the last change of the view
        self.changes = 0
        self._file = None
        self._partial = ""

    def poll(self):
        if self._file is None:
            try:
                self._file = open(self.err_path, "r", errors="replace")
            except FileNotFoundError:
                return
        data = self._file.read()
        if not data:
            return
        data = self._partial + data
        lines = data.split("\n")
        self._partial = lines.pop()
        for line in lines:
            m = LINE.match(line)
            if not m:
                continue
            ts = parse_ts(m.group(1))
            if m.group(2) is not None:
                if m.group(3):  # a client node, not a mesh member
                    continue
                self.view[m.group(2)] = ts
            else:
                peer = m.group(4)
                if peer not in self.view:
                    continue
                del self.view[peer]
                self.lost_at[peer] = ts
            self.last_change = ts
            self.changes += 1

    def alive(self):
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            return state not in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return False

    def proc(self, file):
        """The text of /proc/PID/`file`; NodeExited when the node is gone."""
        try:
            with open(f"/proc/{self.pid}/{file}") as f:
                return f.read()
        except (FileNotFoundError, ProcessLookupError):
            raise NodeExited(self) from None

    def cpu_ticks(self):
        fields = self.proc("stat").rsplit(")", 1)[1].split()
        # fields[0] is field 3 (state): utime is field 14, stime field 15
        return int(fields[11]) + int(fields[12])

    def status(self, key, file="status"):
        """The number after `key:` in /proc/PID/`file` (status, or smaps_rollup)."""
        for line in self.proc(file).splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        if not self.alive():  # a zombie's status has no memory lines
            raise NodeExited(self)
        raise KeyError(key)


class NodeExited(Exception):
    """A node the probe measures exited (its /proc entry is gone, or it is a zombie)."""

    def __init__(self, node):
        super().__init__(node.name)
        self.node = node


def poll_all(nodes):
    for n in nodes:
        n.poll()


def check_alive(nodes, what):
    dead = [n.name for n in nodes if not n.alive()]
    if dead:
        log(f"{what}: node(s) exited: {' '.join(dead[:10])}{' ...' if len(dead) > 10 else ''}"
            f" (see {dead_hint(nodes, dead[0])})")
        return False
    return True


def dead_hint(nodes, name):
    return next(n.err_path for n in nodes if n.name == name)


def signal_node(node, sig):
    """Sends `sig` to `node` (0: checks that it runs); NodeExited when it is gone."""
    try:
        os.kill(node.pid, sig)
    except ProcessLookupError:
        raise NodeExited(node) from None
    if sig != signal.SIGKILL and not node.alive():
        raise NodeExited(node)


def check_watched(nodes):
    """NodeExited for the first of `nodes` that is no longer running."""
    gone = next((n for n in nodes if not n.alive()), None)
    if gone is not None:
        raise NodeExited(gone)


def watching(pred, nodes, every=8):
    """`pred` for wait_until, which also checks every `every` calls that `nodes` run."""
    calls = 0

    def checked():
        nonlocal calls
        calls += 1
        if calls % every == 0:
            check_watched(nodes)
        return pred()
    return checked


def wait_until(pred, deadline, interval, nodes):
    """Poll the logs of `nodes` until pred() holds or time.time() passes deadline."""
    while True:
        for n in nodes:
            n.poll()
            if time.time() >= deadline + 5:
                break  # reading a flood of log lines must not run far past the deadline
        if pred():
            return True
        if time.time() >= deadline:
            return False
        time.sleep(interval)


def fmt(x, digits=3):
    return f"{x:.{digits}f}"


def scrape(host_port, timeout=5.0):
    host, port = host_port.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        body = resp.read().decode()
    finally:
        conn.close()
    values = {}
    for line in body.splitlines():
        if line.startswith("rpclb_peers_connected "):
            values["peers"] = int(float(line.split()[-1]))
        elif line.startswith("rpclb_balancer_members{"):
            values["members"] = int(float(line.split()[-1]))
    return values


def admin_address(node):
    with open(node.out_path) as f:
        for line in f:
            if line.startswith("admin on "):
                return line.split()[-1]
    return None


def verify_admin(nodes, expected_peers, what):
    """The log-replayed view against each node's own gauges. Returns mismatches."""
    bad = 0
    for n in nodes:
        addr = admin_address(n)
        if addr is None:
            log(f"verify-admin: {n.name} printed no admin address")
            bad += 1
            continue
        try:
            v = scrape(addr)
        except OSError as e:
            log(f"verify-admin: {n.name} at {addr}: {e}")
            bad += 1
            continue
        logged = len(n.view)
        if v.get("peers") != logged or logged != expected_peers or v.get("members") != expected_peers + 1:
            log(f"verify-admin ({what}): {n.name}: log view {logged}, rpclb_peers_connected "
                f"{v.get('peers')}, rpclb_balancer_members {v.get('members')}, expected "
                f"{expected_peers} peers")
            bad += 1
    log(f"verify-admin ({what}): {len(nodes) - bad}/{len(nodes)} nodes agree")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--manifest", required=True, help="lines: NAME PID STDERR STDOUT, seed first")
    ap.add_argument("--floor", required=True, help="NAME PID STDERR STDOUT of the memory floor node")
    ap.add_argument("--t-last", type=float, required=True, help="wall time of the last node start")
    ap.add_argument("--deadline", type=float, default=120.0)
    ap.add_argument("--out-deadline", type=float, default=60.0)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--settle", type=float, default=2.0)
    ap.add_argument("--interval", type=float, default=0.25)
    ap.add_argument("--verify-admin", action="store_true")
    a = ap.parse_args()

    nodes = []
    with open(a.manifest) as f:
        for line in f:
            if line.strip():
                name, pid, err, out = line.split()
                nodes.append(Node(name, int(pid), err, out))
    fname, fpid, ferr, fout = a.floor.split()
    floor = Node(fname, int(fpid), ferr, fout)
    names = {n.name for n in nodes}
    N = len(nodes)

    # --- convergence ---------------------------------------------------------------
    def complete(group, members):
        return all(members - {n.name} <= n.view.keys() for n in group)

    deadline = a.t_last + a.deadline
    polls = 0

    def converged_or_dead():
        nonlocal polls
        polls += 1
        if polls % 8 == 0 and not all(n.alive() for n in nodes):
            return True
        return complete(nodes, names)

    wait_until(converged_or_dead, deadline, a.interval, nodes)
    if not complete(nodes, names):
        sizes = sorted(len(n.view) for n in nodes)
        full = sum(1 for s in sizes if s == N - 1)
        if check_alive(nodes, "before convergence"):
            log(f"not converged after {a.deadline:g} s: {full}/{N} nodes see all {N - 1} others; "
                f"view sizes min {sizes[0]} median {sizes[len(sizes) // 2]} max {sizes[-1]}")
        else:
            log(f"not converged when a node exited, {time.time() - a.t_last:.1f} s after the last start: "
                f"{full}/{N} nodes see all {N - 1} others")
        by_name = {n.name: n for n in nodes}
        one_sided = [(n.name, p) for n in nodes for p in n.view if p in by_name
                     and n.name not in by_name[p].view]
        if one_sided:
            log(f"{len(one_sided)} one-sided pairs (A counts B connected, B does not count A), "
                f"e.g. " + ", ".join(f"{a} has {b}" for a, b in one_sided[:5]))
        last = max(n.last_change for n in nodes)
        if last == 0:
            log("no view change read from the logs: the nodes must log at info level or finer")
        else:
            extra = sum(n.changes for n in nodes) - N * (N - 1)
            log(f"last view change {last - a.t_last:.1f} s after the last start; {sum(n.changes for n in nodes)} "
                f"changes, of the N(N-1) = {N * (N - 1)} connects a converged mesh takes"
                + (f" ({extra} beyond them)" if extra > 0 else ""))
        print(f"one_sided_pairs {len(one_sided)}", flush=True)
        print("converge_s not_converged", flush=True)
        print(f"converged_nodes {full}", flush=True)
        print(f"view_min {sizes[0]}", flush=True)
        print(f"view_median {sizes[len(sizes) // 2]}", flush=True)
        return 1
    converged_at = max(max(n.view[p] for p in names - {n.name}) for n in nodes)
    print(f"converge_s {fmt(converged_at - a.t_last)}", flush=True)
    churn = sum(n.changes for n in nodes) - N * (N - 1)
    if churn:
        log(f"{churn} view changes beyond the N(N-1) connects while converging")

    # --- idle CPU --------------------------------------------------------------------
    time.sleep(a.settle)
    if not check_alive(nodes, "before the idle window"):
        return 1
    changes_before = [n.changes for n in nodes]
    c0 = [n.cpu_ticks() for n in nodes]
    t0 = time.monotonic()
    time.sleep(a.idle_seconds)
    c1 = [n.cpu_ticks() for n in nodes]
    t1 = time.monotonic()
    poll_all(nodes)
    cpu_s = (sum(c1) - sum(c0)) / CLK_TCK
    pairs = N * (N - 1) / 2
    elapsed = t1 - t0
    print(f"idle_us_per_pair_s {fmt(cpu_s / elapsed / pairs * 1e6)}", flush=True)
    print(f"idle_cpu_pct {fmt(cpu_s / elapsed * 100, 2)}", flush=True)
    flaps = sum(n.changes for n in nodes) - sum(changes_before)
    if flaps:
        log(f"WARNING: {flaps} view changes during the idle window")
    print(f"idle_view_changes {flaps}", flush=True)

    # --- memory ----------------------------------------------------------------------
    if not check_alive(nodes + [floor], "before the RSS reading"):
        return 1
    rss = [n.status("VmRSS") for n in nodes]
    anon = [n.status("Anonymous", "smaps_rollup") for n in nodes]
    rss_floor = floor.status("VmRSS")
    anon_floor = floor.status("Anonymous", "smaps_rollup")
    print(f"rss_per_peer_kib {fmt(sum((r - rss_floor) / (N - 2) for r in rss) / N, 1)}", flush=True)
    print(f"anon_per_peer_kib {fmt(sum((r - anon_floor) / (N - 2) for r in anon) / N, 1)}", flush=True)
    print(f"rss_node_kib {fmt(sum(rss) / N, 0)}", flush=True)
    print(f"rss_floor_kib {rss_floor}", flush=True)
    print(f"threads_per_node {fmt(sum(n.status('Threads') for n in nodes) / N, 1)}", flush=True)

    status = 0
    if a.verify_admin and verify_admin(nodes, N - 1, "converged"):
        status = 1

    def out_of_views(victim, observers, sig, key):
        """Sends `sig` to `victim`; prints KEY with the seconds until no observer has it in
        its view (or "timeout"). True when it left every view in time. NodeExited when an
        observer exits meanwhile, or the victim of a signal other than SIGKILL."""
        poll_all(observers)
        t0 = time.time()
        signal_node(victim, sig)
        watched = observers if sig == signal.SIGKILL else observers + [victim]
        if wait_until(watching(lambda: all(victim.name not in n.view for n in observers), watched),
                      t0 + a.out_deadline, a.interval / 5, observers):
            if victim in watched and not victim.alive():
                raise NodeExited(victim)  # out of the views because it died, not stalled
            print(f"{key} {fmt(max(n.lost_at[victim.name] for n in observers) - t0)}", flush=True)
            return True
        check_watched(watched)
        left = sum(1 for n in observers if victim.name in n.view)
        log(f"{victim.name} still in {left} views {a.out_deadline:g} s after {signal.Signals(sig).name}")
        print(f"{key} timeout", flush=True)
        return False

    # --- SIGKILL a non-seed node ---------------------------------------------------------
    killed = nodes[-1]
    rest = [n for n in nodes if n is not killed]
    if not out_of_views(killed, rest, signal.SIGKILL, "kill_out_s"):
        status = 1

    # --- SIGSTOP another non-seed node -------------------------------------------------------
    stalled = nodes[-2]
    others = [n for n in rest if n is not stalled]
    stalled_out = False
    try:
        stalled_out = out_of_views(stalled, others, signal.SIGSTOP, "stall_out_s")
        if not stalled_out:
            status = 1
    finally:
        t_cont = time.time()
        try:
            os.kill(stalled.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # it exited: NodeExited is on its way, or is raised below
    signal_node(stalled, 0)

    # --- and back: every remaining node sees the resumed one, and it sees them ------------
    live = {n.name for n in rest}
    if not stalled_out:
        print("stall_rejoin_s not_measured", flush=True)  # it never left: nothing to rejoin
    elif wait_until(watching(lambda: complete(rest, live), rest), t_cont + a.out_deadline, a.interval, rest):
        back = max(max(n.view[p] for p in live - {n.name}) for n in rest)
        print(f"stall_rejoin_s {fmt(back - t_cont)}", flush=True)
    else:
        sizes = sorted(len(n.view) for n in rest)
        log(f"the resumed {stalled.name} not back in every view {a.out_deadline:g} s after "
            f"SIGCONT: its view {len(stalled.view)}, others' min {sizes[0]}")
        print("stall_rejoin_s timeout", flush=True)
    if a.verify_admin and verify_admin(rest, N - 2, "after kill and stall"):
        status = 1
    return status


if __name__ == "__main__":
    try:
        sys.exit(main())
    except NodeExited as gone:
        log(f"node {gone.node.name} exited while being measured (see {gone.node.err_path})")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
