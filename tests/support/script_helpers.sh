# Helpers shared by the shell tests (tests/*.sh); source it after cd-ing into
# the test's work directory. A test may list, in failure_logs, the files
# whose contents a failure should print (the servers' stderr, say).
# shellcheck shell=bash

failure_logs=()

# Fails the test with MESSAGE, after printing the files in failure_logs.
fail() { # MESSAGE...
  echo "FAIL: $*" >&2
  local log
  for log in "${failure_logs[@]}"; do
    [[ -f $log ]] && { echo "--- $log" >&2; cat "$log" >&2; }
  done
  exit 1
}

# Runs COMMAND and fails the test when it succeeds.
must_fail() { # COMMAND...
  if "$@" </dev/null >must_fail.out 2>&1; then
    cat must_fail.out >&2
    fail "expected failure: $*"
  fi
}

# Runs COMMAND and fails the test unless it fails saying PATTERN.
must_fail_saying() { # PATTERN COMMAND...
  local pattern=$1
  shift
  must_fail "$@"
  grep -q -- "$pattern" must_fail.out || fail "no '$pattern' in: $(cat must_fail.out)"
}

# Waits up to 60 s for a line matching PATTERN in FILE, written by the
# process PID; fails the test when PID exits first.
wait_for_line() { # FILE PATTERN PID
  local _
  for _ in $(seq 600); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    kill -0 "$3" 2>/dev/null || fail "process $3 exited: $(cat "$1")"
    sleep 0.1
  done
  fail "no '$2' in $1"
}
