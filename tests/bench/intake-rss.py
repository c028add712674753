#!/usr/bin/env python3
"""Peak RSS of tally-server under the intake's attack requests (issue 30).

Each request is sent, as raw gRPC bytes over HTTP/2 (curl), to a fresh
tally-server process at its default limits; the figure is the growth of the
process's peak resident memory (VmHWM) over the call. Run it against two
builds to compare them:

    tests/bench/intake-rss.py --server target/release/tally-server \\
        --database-url postgres://...

Without --database-url a scratch PostgreSQL is started through tally itself
(its private server under a temporary directory), and a database is made
per server process, so builds with different migrations do not meet.

--memory-limit-mib N also runs two concurrent maximum-size valid enrolls
against a server in a memory cgroup (cgroup v1 or v2) limited to N MiB and
reports whether it survived and answered.
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number, data):
    return varint((number << 3) | 2) + varint(len(data)) + data


def empty_entries(number, n):
    return bytes([(number << 3) | 2, 0]) * n


def framed(message):
    return b"\0" + struct.pack(">I", len(message)) + message


def peak_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def call(addr, method, frame, timeout=300):
    """(grpc-status, grpc-message, body bytes) of one raw call."""
    with tempfile.NamedTemporaryFile() as body, tempfile.NamedTemporaryFile() as out:
        body.write(frame)
        body.flush()
        headers = subprocess.run(
            [
                "curl", "-s", "--http2-prior-knowledge", "-X", "POST",
                "-H", "content-type: application/grpc", "-H", "te: trailers",
                "--data-binary", f"@{body.name}", "-D", "-", "-o", out.name,
                "--max-time", str(timeout), f"http://{addr}{method}",
            ],
            capture_output=True,
            check=False,
        ).stdout.decode(errors="replace")
        data = open(out.name, "rb").read()
    status = re.search(r"grpc-status: *(\d+)", headers)
    message = re.search(r"grpc-message: *([^\r\n]*)", headers)
    return (
        status.group(1) if status else ("0" if data else "?"),
        urllib.parse.unquote(message.group(1)) if message else "",
        data,
    )


class Server:
    """A tally-server process (in a memory cgroup when asked)."""

    def __init__(self, binary, url, extra=(), cgroup=None):
        args = [
            binary, "--database-url", url, "--grpc-addr", "127.0.0.1:0",
            "--metrics-addr", "127.0.0.1:0", "--log-format", "json",
            "--auth", "disabled", *extra,
        ]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={**os.environ, "TALLY_LOG": "info"},
            preexec_fn=(lambda: cgroup.enter(os.getpid())) if cgroup else None,
        )
        self.addr = None
        for line in self.proc.stdout:
            try:
                v = json.loads(line)
            except ValueError:
                continue
            if v.get("fields", {}).get("message") == "tally serving":
                self.addr = v["fields"]["grpc"]
                break
        if self.addr is None:
            raise RuntimeError("the server did not start")

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()


class Cgroup:
    """A memory cgroup limited to `mib` MiB."""

    def __init__(self, mib):
        v2 = "/sys/fs/cgroup/cgroup.controllers"
        if os.path.exists(v2):
            self.path = f"/sys/fs/cgroup/tally-rss-{os.getpid()}"
            os.mkdir(self.path)
            open(f"{self.path}/memory.max", "w").write(str(mib << 20))
            open(f"{self.path}/memory.swap.max", "w").write("0")
        else:
            self.path = f"/sys/fs/cgroup/memory/tally-rss-{os.getpid()}"
            os.mkdir(self.path)
            open(f"{self.path}/memory.limit_in_bytes", "w").write(str(mib << 20))
        self.v2 = os.path.exists(v2)

    def enter(self, pid):
        open(f"{self.path}/cgroup.procs", "w").write(str(pid))

    def peak(self):
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        try:
            return int(open(f"{self.path}/{name}").read())
        except OSError:
            return None

    def ooms(self):
        name = "memory.events" if self.v2 else "memory.oom_control"
        text = open(f"{self.path}/{name}").read()
        m = re.search(r"oom_kill (\d+)", text)
        return int(m.group(1)) if m else 0

    def remove(self):
        try:
            os.rmdir(self.path)
        except OSError:
            pass


def scratch_postgres(binary):
    data = tempfile.mkdtemp(prefix="tally-rss-pg-")
    proc = subprocess.Popen(
        [binary, "--data-dir", data, "--grpc-addr", "127.0.0.1:0",
         "--metrics-addr", "127.0.0.1:0", "--log-format", "json", "--auth", "disabled"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    for line in proc.stdout:
        if b"tally serving" in line:
            break
    port = open(f"{data}/port").read().strip()
    password = open(f"{data}/superuser-password").read().strip()
    admin = f"postgres://postgres:{urllib.parse.quote(password)}@127.0.0.1:{port}/postgres"
    return proc, data, admin


def psql(admin, sql):
    subprocess.run(["psql", admin, "-qAtc", sql], check=True, capture_output=True)


def database(admin, name):
    psql(admin, f'DROP DATABASE IF EXISTS "{name}"')
    psql(admin, f'CREATE DATABASE "{name}"')
    return admin.rsplit("/", 1)[0] + "/" + name


def attacks(max_message):
    """(name, method, frame) of each request measured."""
    rows2m = field(1, b"ledgers/big") + empty_entries(2, 2_000_000)
    group = bytes([(9 << 3) | 3, (9 << 3) | 4])
    deps = field(1, b"ledgers/big") + field(2, field(1, b"k") + empty_entries(3, 2_000_000))
    answers = (field(1, b"ledgers/big/jobs/j")
               + field(2, b"ledgers/big/claims/00000000-0000-0000-0000-000000000000")
               + empty_entries(3, 520_000))
    redrive = field(1, b"ledgers/big") + field(2, empty_entries(1, 2_000_000))
    golden = field(1, field(1, b"ledgers/big/golden") + field(2, empty_entries(5, 500_000)))
    return [
        ("4,000,000 empty rows", "/tally.v1.LedgerService/EnrollRows",
         framed(field(1, b"ledgers/big") + empty_entries(2, 4_000_000))),
        ("empty group + 2,000,000 empty rows", "/tally.v1.LedgerService/EnrollRows",
         framed(group + rows2m)),
        ("empty group + 2,000,000 outcomes", "/tally.v1.LedgerService/ReportOutcomes",
         framed(group + field(1, b"ledgers/big/claims/00000000-0000-0000-0000-000000000000")
                + empty_entries(2, 2_000_000))),
        ("one row, 2,000,000 depends_on", "/tally.v1.LedgerService/EnrollRows", framed(deps)),
        ("520,000 golden answers", "/tally.v1.JobService/ReportGoldenResults", framed(answers)),
        ("2,000,000 redrive keys", "/tally.v1.LedgerService/RedriveRows", framed(redrive)),
        ("500,000 golden row fields", "/tally.v1.LedgerService/SetGoldenRows", framed(golden)),
    ]


def valid_enroll(ledger, max_message, rows=10_000):
    """The largest valid EnrollRows under `max_message` bytes: `rows` rows
    with payloads of equal size."""
    per_row = (max_message - 64) // rows - 40
    parent = field(1, f"ledgers/{ledger}".encode())
    body = bytearray(parent)
    for i in range(rows):
        key = f"k{i:07d}".encode()
        text = b'{"t": "' + b"x" * max(per_row - 12, 0) + b'"}'
        body += field(2, field(1, key) + field(2, text))
    assert len(body) <= max_message, (len(body), max_message)
    return framed(bytes(body))


def create_ledger(addr, ledger):
    code, msg, _ = call(addr, "/tally.v1.LedgerService/CreateLedger", framed(field(1, ledger.encode())))
    if code not in ("0", "6"):
        raise RuntimeError(f"CreateLedger: {code} {msg}")


def max_message_of(binary):
    help_text = subprocess.run([binary, "--help"], capture_output=True, text=True).stdout
    m = re.search(r"--max-message-bytes <MAX_MESSAGE_BYTES>.*?\[default: (\d+)\]", help_text, re.S)
    return int(m.group(1))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", required=True, help="the tally-server binary")
    p.add_argument("--database-url", help="an admin URL (CREATE DATABASE allowed)")
    p.add_argument("--memory-limit-mib", type=int, help="also run two concurrent valid enrolls in a cgroup this large")
    p.add_argument("--only", help="run only attacks whose name contains this")
    p.add_argument("--server-arg", action="append", default=[], help="a flag for every server (repeat)")
    p.add_argument("--max-message-bytes", type=int, help="size of the valid enrolls (default: the server's)")
    a = p.parse_args()

    pg = None
    admin = a.database_url
    if admin is None:
        pg, pgdir, admin = scratch_postgres(a.server)
    max_message = a.max_message_bytes or max_message_of(a.server)
    print(f"server {a.server}, --max-message-bytes {max_message}")
    results = []
    try:
        for n, (name, method, frame) in enumerate(attacks(max_message)):
            if a.only and a.only not in name:
                continue
            url = database(admin, f"rss{n}")
            s = Server(a.server, url, extra=a.server_arg)
            try:
                create_ledger(s.addr, "big")
                before = peak_rss(s.proc.pid)
                code, msg, _ = call(s.addr, method, frame)
                alive = s.alive()
                after = peak_rss(s.proc.pid) if alive else None
            finally:
                s.stop()
            grow = f"+{(after - before) / 2**20:.1f} MiB" if after else "died"
            print(f"{name:40} {len(frame) / 2**20:6.1f} MiB on the wire  peak RSS {before / 2**20:6.1f} -> "
                  f"{(after or 0) / 2**20:6.1f} MiB ({grow})  answer {code} {msg[:90]}")
            results.append((name, before, after, code))

        url = database(admin, "rssvalid")
        s = Server(a.server, url, extra=a.server_arg)
        try:
            create_ledger(s.addr, "big")
            frame = valid_enroll("big", max_message)
            before = peak_rss(s.proc.pid)
            code, msg, _ = call(s.addr, "/tally.v1.LedgerService/EnrollRows", frame)
            after = peak_rss(s.proc.pid)
        finally:
            s.stop()
        print(f"{'one maximum-size valid enroll':40} {len(frame) / 2**20:6.1f} MiB on the wire  peak RSS "
              f"{before / 2**20:6.1f} -> {after / 2**20:6.1f} MiB (+{(after - before) / 2**20:.1f} MiB)  answer {code} {msg[:60]}")

        if a.memory_limit_mib:
            cg = Cgroup(a.memory_limit_mib)
            url = database(admin, "rsscgroup")
            s = Server(a.server, url, extra=a.server_arg, cgroup=cg)
            try:
                create_ledger(s.addr, "a")
                create_ledger(s.addr, "b")
                frames = [valid_enroll("a", max_message), valid_enroll("b", max_message)]
                with concurrent.futures.ThreadPoolExecutor(2) as pool:
                    answers = list(pool.map(lambda f: call(s.addr, "/tally.v1.LedgerService/EnrollRows", f), frames))
                alive = s.alive()
                code, msg, _ = call(s.addr, "/grpc.health.v1.Health/Check", framed(b"")) if alive else ("-", "", b"")
                peak = cg.peak()
                print(f"two concurrent maximum-size enrolls in a {a.memory_limit_mib} MiB cgroup: "
                      f"answers {[(c, m[:60]) for c, m, _ in answers]}; server alive: {alive}; "
                      f"health after: {code}; cgroup peak {peak / 2**20 if peak else float('nan'):.1f} MiB; "
                      f"OOM kills {cg.ooms()}")
            finally:
                s.stop()
                cg.remove()
    finally:
        if pg:
            pg.terminate()
            pg.wait()
            shutil.rmtree(pgdir, ignore_errors=True)


if __name__ == "__main__":
    main()
