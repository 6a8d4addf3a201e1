#!/usr/bin/env python3
"""The client half of scripts/soak.sh (standard library only).

Subcommands:
  pool OUT.jsonl --seed S [--count N]
      Writes N deterministic /v1/completions bodies: greedy and seeded
      sampling, short and long prompts, groups sharing long prefixes,
      various max_tokens, some stop strings.
  reference URL POOL OUT.jsonl [--clients C]
      Asks a fault-free server for every body's answer (stream false).
  load URL POOL REFS OUT.jsonl --minutes M --seed S [--clients C]
      Steady mixed load: C clients draw bodies at random, stream or not,
      cancel some streams early; every finished answer is compared with its
      reference. One JSON line per request.
  wait-idle URL OUT.prom [--timeout S]
      Polls /metrics until no engine runs or queues anything, every engine
      is up and no stream is open; writes the last exposition.
  metrics URL
      Prints the caflm_engine_* series and the failover count as CSV fields.
  report DIR
      Reads what soak.sh left in DIR, prints the report, exits 1 on a
      failed check.
"""
import argparse
import http.client
import json
import os
import random
import re
import sys
import threading
import time
import urllib.parse

TIMEOUT_S = 180.0


# -- the request pool ---------------------------------------------------------

def make_words(rng, count):
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    words = set()
    while len(words) < count:
        n = rng.randint(1, 9)
        words.add("".join(rng.choice(letters[: rng.randint(8, 26)]) for _ in range(n)))
    return sorted(words)


def text_of(rng, words, n_words):
    return " ".join(rng.choice(words) for _ in range(n_words))


def make_pool(seed, count):
    rng = random.Random(seed)
    words = make_words(rng, 300)
    # Long shared prefixes (a few hundred tokens each): requests of one
    # group differ only in their tails, so the prefix cache and prefix
    # routing see them.
    prefixes = [text_of(rng, words, rng.randint(50, 90)) for _ in range(8)]
    pool = []
    for i in range(count):
        shape = rng.random()
        if shape < 0.35:
            prompt = text_of(rng, words, rng.randint(1, 12))  # short
        elif shape < 0.55:
            prompt = text_of(rng, words, rng.randint(20, 100))  # long, alone
        else:
            prompt = rng.choice(prefixes) + " " + text_of(rng, words, rng.randint(1, 15))
        body = {
            "prompt": prompt,
            "max_tokens": rng.choice([1, 2, 5, 16, 32, 48, 64, 96, 128]),
        }
        if rng.random() < 0.4:
            body["temperature"] = 0
        else:
            body["temperature"] = rng.choice([0.5, 0.8, 1.0, 1.3])
            body["seed"] = rng.randint(0, 2**31 - 1)
            if rng.random() < 0.3:
                body["top_p"] = rng.choice([0.8, 0.95])
            if rng.random() < 0.3:
                body["top_k"] = rng.choice([5, 40])
        if rng.random() < 0.1:
            body["stop"] = [rng.choice(["e ", "th", "an", "o"])]
        if rng.random() < 0.2:
            body["ignore_eos"] = True
        pool.append({"idx": i, "body": body})
    return pool


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# -- HTTP ---------------------------------------------------------------------

class Failure(Exception):
    def __init__(self, reason, detail=""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def error_reason(status, payload):
    """'http STATUS TYPE' from an OpenAI error object, with its message."""
    try:
        err = json.loads(payload).get("error", {})
        kind = err.get("type") or err.get("code") or "error"
        return f"http {status} {kind}", str(err.get("message", ""))[:300]
    except (ValueError, AttributeError):
        return f"http {status}", payload[:300]


def connect(url):
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=TIMEOUT_S)


def complete(url, body, stream, cancel_after=None):
    """One request: (text, finish_reason, chunks) or raises Failure.
    cancel_after: close the connection after that many streamed chunks
    (then returns None)."""
    body = dict(body, stream=stream)
    conn = connect(url)
    try:
        try:
            conn.request("POST", "/v1/completions", json.dumps(body),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            raise Failure(f"transport {type(e).__name__}", str(e))
        if resp.status != 200:
            raise Failure(*error_reason(resp.status, resp.read().decode("utf-8", "replace")))
        if not stream:
            try:
                answer = json.loads(resp.read())
            except (OSError, ValueError, http.client.HTTPException) as e:
                raise Failure(f"bad response {type(e).__name__}", str(e))
            choice = answer["choices"][0]
            return choice["text"], choice["finish_reason"], 1
        text, finish, chunks = [], None, 0
        try:
            while True:
                line = resp.readline()
                if not line:
                    raise Failure("stream ended without [DONE]", "".join(text)[-200:])
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:
                    raise Failure(*error_reason("stream", json.dumps(event)))
                for choice in event.get("choices", []):
                    text.append(choice.get("text", ""))
                    if choice.get("finish_reason"):
                        finish = choice["finish_reason"]
                chunks += 1
                if cancel_after is not None and chunks >= cancel_after:
                    return None
        except (OSError, ValueError, http.client.HTTPException) as e:
            raise Failure(f"stream broken {type(e).__name__}", str(e))
        return "".join(text), finish, chunks
    finally:
        conn.close()


# -- subcommands --------------------------------------------------------------

def cmd_pool(args):
    with open(args.out, "w", encoding="utf-8") as f:
        for entry in make_pool(args.seed, args.count):
            f.write(json.dumps(entry) + "\n")


def cmd_reference(args):
    pool = read_jsonl(args.pool)
    refs = [None] * len(pool)
    errors = []
    next_index = [0]
    lock = threading.Lock()

    def run():
        while True:
            with lock:
                i = next_index[0]
                next_index[0] += 1
            if i >= len(pool):
                return
            try:
                text, finish, _ = complete(args.url, pool[i]["body"], stream=False)
                refs[i] = {"idx": i, "text": text, "finish_reason": finish}
            except Failure as e:
                errors.append(f"request {i}: {e.reason} {e.detail}")

    threads = [threading.Thread(target=run) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        sys.exit("reference run failed: " + "; ".join(errors[:5]))
    with open(args.out, "w", encoding="utf-8") as f:
        for ref in refs:
            f.write(json.dumps(ref) + "\n")
    print(f"reference: {len(refs)} answers")


def cmd_load(args):
    pool = read_jsonl(args.pool)
    refs = {r["idx"]: r for r in read_jsonl(args.refs)}
    end = time.time() + args.minutes * 60.0
    out = open(args.out, "w", encoding="utf-8")
    lock = threading.Lock()

    def client(number):
        rng = random.Random(args.seed * 1000 + number)
        while time.time() < end:
            entry = rng.choice(pool)
            stream = rng.random() < 0.5
            cancel_after = rng.randint(1, 6) if stream and rng.random() < 0.15 else None
            record = {"client": number, "idx": entry["idx"], "stream": stream,
                      "start": time.time()}
            try:
                result = complete(args.url, entry["body"], stream, cancel_after)
                if result is None:
                    record["outcome"] = "cancelled"
                else:
                    text, finish, _ = result
                    ref = refs[entry["idx"]]
                    if text == ref["text"] and finish == ref["finish_reason"]:
                        record["outcome"] = "ok"
                    else:
                        record.update(outcome="altered", text=text, finish_reason=finish,
                                      ref_text=ref["text"], ref_finish_reason=ref["finish_reason"])
            except Failure as e:
                record.update(outcome="failed", reason=e.reason, detail=e.detail)
            record["end"] = time.time()
            with lock:
                out.write(json.dumps(record) + "\n")
                out.flush()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.close()


def fetch_metrics(url):
    conn = connect(url)
    conn.timeout = 10
    try:
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        return resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


SAMPLE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$')


def parse_metrics(text):
    """[(name, {label: value}, float)] of a Prometheus exposition."""
    series = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        series.append((m.group(1), labels, float(m.group(3))))
    return series


def engines_of(series):
    """{engine: {up, running, waiting, used, total}} from caflm_engine_*."""
    fields = {"caflm_engine_up": "up", "caflm_engine_running": "running",
              "caflm_engine_waiting": "waiting", "caflm_engine_kv_blocks_used": "used",
              "caflm_engine_kv_blocks_total": "total"}
    engines = {}
    for name, labels, value in series:
        if name in fields:
            engines.setdefault(labels.get("engine", "?"), {})[fields[name]] = value
    return engines


def value_of(series, name):
    return sum(v for n, _, v in series if n == name)


def cmd_metrics(args):
    """CSV rows: engine,up,running,waiting,used,total (one per engine), then
    failovers,VALUE."""
    try:
        series = parse_metrics(fetch_metrics(args.url))
    except (OSError, http.client.HTTPException):
        return
    for engine, f in sorted(engines_of(series).items()):
        print(",".join([engine] + [str(int(f.get(k, -1))) for k in
                                   ("up", "running", "waiting", "used", "total")]))
    print(f"failovers,{int(value_of(series, 'caflm_failovers_total'))}")


def cmd_wait_idle(args):
    deadline = time.time() + args.timeout
    text = ""
    engines_idle_since = None
    while time.time() < deadline:
        try:
            text = fetch_metrics(args.url)
        except (OSError, http.client.HTTPException):
            time.sleep(1)
            continue
        series = parse_metrics(text)
        engines = engines_of(series)
        idle = engines and all(e.get("up") == 1 and e.get("running") == 0 and
                               e.get("waiting") == 0 for e in engines.values())
        if idle and value_of(series, "caflm_http_streams_open") == 0:
            break
        # Engines idle but streams still counted open: give the server 10 s
        # to close them, then report what it says.
        if idle:
            engines_idle_since = engines_idle_since or time.time()
            if time.time() - engines_idle_since > 10:
                break
        else:
            engines_idle_since = None
        time.sleep(1)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)


# -- the report ---------------------------------------------------------------

def slope_per_minute(points):
    """Least-squares slope of [(t_s, value)], per minute; 0 for < 2 points."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return 60.0 * sum((t - mt) * (v - mv) for t, v in points) / var


def read_csv(path):
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n").split(",") for line in f if line.strip()]
    header, rows = lines[0], lines[1:]
    return [dict(zip(header, row)) for row in rows]


def cmd_report(args):
    d = args.dir
    failed_checks = []
    records = read_jsonl(os.path.join(d, "requests.jsonl"))
    faults = read_jsonl(os.path.join(d, "faults.jsonl")) if os.path.exists(
        os.path.join(d, "faults.jsonl")) else []
    # A fault's window: from the signal until its worker serves again, plus
    # a grace period for the coordinator to notice.
    windows = [(f["start"], f.get("end", f["start"]) + 5.0, f) for f in faults]

    def overlaps_fault(r):
        return any(r["start"] <= end and r["end"] >= start for start, end, _ in windows)

    counts = {}
    for r in records:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    print("== caflm soak report ==")
    if records:
        span = max(r["end"] for r in records) - min(r["start"] for r in records)
        print(f"load: {len(records)} requests in {span / 60:.1f} min "
              f"({sum(r['stream'] for r in records)} streamed)")
    print(f"completed and identical: {counts.get('ok', 0)}")
    print(f"altered: {counts.get('altered', 0)}")
    print(f"cancelled mid-stream (not compared): {counts.get('cancelled', 0)}")
    print(f"failed: {counts.get('failed', 0)}")
    reasons = {}
    for r in records:
        if r["outcome"] == "failed":
            key = (r["reason"], "during a fault" if overlaps_fault(r) else "NO FAULT")
            reasons.setdefault(key, []).append(r)
    for (reason, when), rs in sorted(reasons.items()):
        print(f"  {len(rs):5d}  {reason} ({when}): {rs[0].get('detail', '')[:160]}")
        if when == "NO FAULT":
            failed_checks.append(f"{len(rs)} request(s) failed with '{reason}' outside any fault")
    altered = [r for r in records if r["outcome"] == "altered"]
    for r in altered[:5]:
        print(f"  ALTERED request {r['idx']} (stream {r['stream']}, fault overlap "
              f"{overlaps_fault(r)}): got {r['text']!r} ({r['finish_reason']}), "
              f"expected {r['ref_text']!r} ({r['ref_finish_reason']})")
    if altered:
        failed_checks.append(f"{len(altered)} request(s) altered")
    if not any(r["outcome"] == "ok" for r in records):
        failed_checks.append("no request completed")

    kinds = {}
    for f in faults:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
        if not f.get("recovered", True):
            failed_checks.append(f"worker {f['worker']} did not come back after {f['kind']}")
    print("faults injected: " + (", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))
                                 or "none"))
    final = parse_metrics(open(os.path.join(d, "final_metrics.prom"), encoding="utf-8").read())
    print(f"failovers (caflm_failovers_total): {int(value_of(final, 'caflm_failovers_total'))}")
    # The coordinator's own account: each lost engine, why, and how many
    # requests failed over from it.
    lost = {}
    moved = 0
    coordinator_log = os.path.join(d, "coordinator.err")
    if os.path.exists(coordinator_log):
        for line in open(coordinator_log, encoding="utf-8", errors="replace"):
            m = re.search(r"lost the remote engine at \S+ \((.*?)\); (\d+) request", line)
            if m:
                why = re.sub(r"\d+ ms", "N ms", m.group(1))[:90]
                lost[why] = lost.get(why, 0) + 1
                moved += int(m.group(2))
    print(f"coordinator log: {sum(lost.values())} engine losses, {moved} requests failed over")
    for why, count in sorted(lost.items(), key=lambda kv: -kv[1]):
        print(f"  {count:5d}  {why}")
    kills = kinds.get("kill", 0) + kinds.get("stop", 0)
    if sum(lost.values()) > kills:
        # A kill loses its engine once, a stop at most once: more losses
        # mean links dropped without a fault.
        failed_checks.append(f"the coordinator lost engines {sum(lost.values())} times for "
                             f"{kills} faults injected: links dropped without a fault")
    print(f"preemptions (vllm:num_preemptions_total): "
          f"{int(value_of(final, 'vllm:num_preemptions_total'))}")

    # KV blocks once idle: no engine runs or queues anything, so every used
    # block is held by the prefix cache alone (caflm_engine_kv_blocks_used
    # counts cache-held blocks too). The probe then asked each worker for a
    # sequence of its whole pool, which only fits if every block not held by
    # the cache comes back.
    print("engines once idle:")
    engines = engines_of(final)
    if not engines:
        failed_checks.append("no engine in the final /metrics")
    for name, e in sorted(engines.items()):
        print(f"  {name}: up {int(e.get('up', -1))}, running {int(e.get('running', -1))}, "
              f"waiting {int(e.get('waiting', -1))}, KV blocks used {int(e.get('used', -1))} "
              f"of {int(e.get('total', -1))} (prefix cache only)")
        if e.get("up") != 1 or e.get("running") != 0 or e.get("waiting") != 0:
            failed_checks.append(f"engine {name} not idle and up at the end: {e}")
    streams_open = value_of(final, "caflm_http_streams_open")
    if streams_open != 0:
        failed_checks.append(f"caflm_http_streams_open reads {int(streams_open)} once idle with no "
                             f"client connected ({counts.get('cancelled', 0)} streams were "
                             f"cancelled by their clients)")
    probe_path = os.path.join(d, "kv_probe.txt")
    if os.path.exists(probe_path):
        for line in open(probe_path, encoding="utf-8"):
            print("  " + line.rstrip())
            if line.startswith("FAIL"):
                failed_checks.append(line.strip())

    # Per process: RSS, fds and threads after warm-up.
    samples = read_csv(os.path.join(d, "processes.csv"))
    t0 = min(float(s["time_s"]) for s in samples) if samples else 0
    warmup = args.warmup_s
    print(f"process trends after {warmup:.0f} s of warm-up (slope per minute, first -> last):")
    # AddressSanitizer keeps freed memory in quarantine (256 MiB a process),
    # so RSS climbs by design under scripts/sanitize.sh; LeakSanitizer
    # judges leaks there instead, when each process exits.
    rss_judged = "address" not in os.environ.get("CAFLM_SANITIZERS", "")
    if not rss_judged:
        print("  (RSS not judged: built with AddressSanitizer, whose quarantine holds freed memory)")
    by_process = {}
    for s in samples:
        if float(s["time_s"]) - t0 < warmup:
            continue
        by_process.setdefault(s["process"], []).append(s)
    for process, rows in sorted(by_process.items()):
        # A restarted worker is a new process: trend its latest life only.
        pid = rows[-1]["pid"]
        lives = len({r["pid"] for r in rows})
        rows = [r for r in rows if r["pid"] == pid]
        parts = []
        for field, unit, limit_growth in (("rss_kib", "MiB", 64 * 1024), ("fds", "", 16),
                                          ("threads", "", 8)):
            pts = [(float(r["time_s"]), float(r[field])) for r in rows if r[field] != ""]
            if not pts:
                continue
            scale = 1024.0 if unit == "MiB" else 1.0
            slope = slope_per_minute(pts) / scale
            first, last = pts[0][1] / scale, pts[-1][1] / scale
            parts.append(f"{field.replace('_kib', '')} {first:.1f}->{last:.1f}{unit} "
                         f"({slope:+.2f}/min)")
            growth = pts[-1][1] - pts[0][1]
            minutes = (pts[-1][0] - pts[0][0]) / 60.0
            # A leak grows steadily: both the slope and the growth must pass
            # the bound, so that one allocation burst is not a leak.
            judged = rss_judged or field != "rss_kib"
            if judged and growth > limit_growth and slope * scale * max(minutes, 1.0) > limit_growth:
                failed_checks.append(f"{process} {field} grew {first:.1f}->{last:.1f}{unit} "
                                     f"({slope:+.2f}{unit}/min): leak?")
        print(f"  {process} (pid {pid}, {len(rows)} samples"
              f"{f', {lives} lives' if lives > 1 else ''}): " + "; ".join(parts))
    # How each process ended (soak.sh's watched): only those the injector
    # killed may have ended before the report.
    killed = {f.get("pid") for f in faults if f["kind"] == "kill"}
    stopped_path = os.path.join(d, "stopped_pids.txt")
    if os.path.exists(stopped_path):
        killed |= {int(x) for x in open(stopped_path, encoding="utf-8").read().split()}
    exits_path = os.path.join(d, "exits_during_soak.log")
    if os.path.exists(exits_path):
        for line in open(exits_path, encoding="utf-8"):
            parts = line.split()
            if len(parts) == 4 and int(parts[2]) not in killed:
                failed_checks.append(f"{parts[1]} (pid {parts[2]}) ended on its own with status "
                                     f"{parts[3]} (137: SIGKILL, 139: SIGSEGV, 134: abort) at "
                                     f"{time.strftime('%H:%M:%S', time.gmtime(float(parts[0])))}")
    exits = os.path.join(d, "unexpected_exits.txt")
    if os.path.exists(exits) and os.path.getsize(exits) > 0:
        for line in open(exits, encoding="utf-8"):
            failed_checks.append(line.strip())

    if failed_checks:
        print("RESULT: FAIL")
        for c in failed_checks:
            print(f"  - {c}")
        sys.exit(1)
    print("RESULT: PASS")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("pool")
    s.add_argument("out")
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--count", type=int, default=200)
    s = sub.add_parser("reference")
    s.add_argument("url")
    s.add_argument("pool")
    s.add_argument("out")
    s.add_argument("--clients", type=int, default=4)
    s = sub.add_parser("load")
    s.add_argument("url")
    s.add_argument("pool")
    s.add_argument("refs")
    s.add_argument("out")
    s.add_argument("--minutes", type=float, required=True)
    s.add_argument("--seed", type=int, required=True)
    s.add_argument("--clients", type=int, default=4)
    s = sub.add_parser("wait-idle")
    s.add_argument("url")
    s.add_argument("out")
    s.add_argument("--timeout", type=float, default=120)
    s = sub.add_parser("metrics")
    s.add_argument("url")
    s = sub.add_parser("report")
    s.add_argument("dir")
    s.add_argument("--warmup-s", type=float, default=30)
    args = p.parse_args()
    {"pool": cmd_pool, "reference": cmd_reference, "load": cmd_load, "wait-idle": cmd_wait_idle,
     "metrics": cmd_metrics, "report": cmd_report}[args.command](args)


if __name__ == "__main__":
    main()
