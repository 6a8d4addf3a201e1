#!/usr/bin/env python3
"""Progress of long `caflm` work: shown on standard error when it is a
terminal (a pseudo-terminal here), never on standard output and never when
standard error is a file or pipe.

Usage: cli_progress.py CAFLM_BINARY WORK_DIR
"""
import json
import os
import pty
import subprocess
import sys


def run(argv, stderr_tty):
    """Runs argv with stdout to a pipe and stderr to a pty or a pipe;
    returns (exit code, stdout text, stderr text)."""
    if not stderr_tty:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=600)
        return done.returncode, done.stdout.decode(), done.stderr.decode()
    primary, secondary = pty.openpty()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=secondary)
    os.close(secondary)
    terminal = b""
    while True:
        try:
            data = os.read(primary, 4096)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        terminal += data
    out = process.stdout.read().decode()
    process.wait(timeout=600)
    os.close(primary)
    return process.returncode, out, terminal.decode(errors="replace")


def check(condition, what):
    if not condition:
        print("FAIL:", what, file=sys.stderr)
        sys.exit(1)


def main():
    caflm, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "model.gguf")
    subprocess.run([caflm, "make-test-model", "--out", model, "--arch", "llama", "--dim", "64",
                    "--layers", "2", "--heads", "4", "--kv-heads", "2", "--ffn", "128",
                    "--seed", "3"], check=True, stdout=subprocess.DEVNULL)
    requests = os.path.join(work, "requests.jsonl")
    with open(requests, "w") as f:
        for i in range(5):
            f.write(json.dumps({"id": i, "prompt": "Hello %d" % i, "max_tokens": 8,
                                "ignore_eos": True}) + "\n")
    generate = [caflm, "generate", "--model", model, "--requests", requests]

    code, out, terminal = run(generate, stderr_tty=True)
    check(code == 0, "generate --requests exits 0: " + terminal)
    lines = out.splitlines()
    check(len(lines) == 5, "five answers on stdout, got %r" % out)
    for line in lines:
        json.loads(line)  # stdout is pure JSON lines: no progress in it
    check("requests 5/5 done, 0 failed" in terminal, "final progress on the terminal: %r" % terminal)
    check(terminal.endswith("\r\x1b[2K"), "the progress line is erased at the end: %r" % terminal[-40:])

    code, out, err = run(generate, stderr_tty=False)
    check(code == 0 and len(out.splitlines()) == 5, "generate without a terminal")
    check("\x1b" not in err and "requests" not in err, "no progress into a pipe: %r" % err)

    bench = [caflm, "bench", "--model", model, "--prompt-tokens", "8", "--gen-tokens", "4",
             "--concurrency", "1,2", "--json", "--no-kv-waste"]
    code, out, terminal = run(bench, stderr_tty=True)
    check(code == 0, "bench exits 0: " + terminal)
    report = json.loads(out)  # one JSON document, nothing mixed in
    check(len(report["results"]) == 2, "two sizes measured")
    check("bench: 2 sequence(s) of 8 + 4 tokens (2 of 2)" in terminal,
          "bench says which size it is on: %r" % terminal)
    print("cli progress: ok")


main()
