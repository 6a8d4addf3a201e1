#!/usr/bin/env python3
"""A tiny fake OpenAI-compatible server for the tests of `caflm bench-serve`.

POST /v1/completions streams `text_completion` chunks (Server-Sent Events,
chunked transfer encoding) at a fixed pace, then a usage chunk and
`data: [DONE]`; GET /v1/models lists one model. It checks each request's
shape (token-id prompt, max_tokens, ignore_eos, stream, include_usage) and
answers 400 when it is wrong, so a test learns what the client sent.

Prints `PORT <n>` on its first line once it listens, then serves until it
is killed.
"""

import argparse
import json
import os
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--first-delay", type=float, default=0.02,
                        help="seconds before the first token (the prefill)")
    parser.add_argument("--delay", type=float, default=0.005,
                        help="seconds between chunks")
    parser.add_argument("--tokens-per-chunk", type=int, default=1)
    parser.add_argument("--reject-every", type=int, default=0,
                        help="answer every Nth completion request with 429")
    parser.add_argument("--error-event-every", type=int, default=0,
                        help="end every Nth stream with an error event")
    parser.add_argument("--no-usage", action="store_true",
                        help="never send the usage chunk")
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--api-key", default="")
    parser.add_argument("--log", default="",
                        help="append each completion request's body, one JSON a line")
    return parser.parse_args()


ARGS = parse_args()
LOCK = threading.Lock()
COUNTER = [0]


def check_request(body):
    """The reason `body` is not what bench-serve must send, or None."""
    if body.get("model") != ARGS.model:
        return "unknown model %r" % body.get("model")
    prompt = body.get("prompt")
    if not isinstance(prompt, list) or not prompt:
        return "prompt must be a non-empty list of token ids"
    for token in prompt:
        if not isinstance(token, int) or isinstance(token, bool) or not 0 <= token < ARGS.vocab_size:
            return "bad token id %r" % (token,)
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        return "max_tokens must be a positive integer"
    if body.get("stream") is not True or body.get("ignore_eos") is not True:
        return "stream and ignore_eos must be true"
    if body.get("stream_options", {}).get("include_usage") is not True:
        return "stream_options.include_usage must be true"
    if body.get("temperature") != 0:
        return "temperature must be 0"
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass

    def send_json(self, status, payload, extra_headers=()):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in extra_headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(self, status, message, extra_headers=()):
        self.send_json(status, {"error": {"message": message, "type": "invalid_request_error",
                                          "param": None, "code": status}}, extra_headers)

    def authorized(self):
        if not ARGS.api_key:
            return True
        if self.headers.get("Authorization") == "Bearer " + ARGS.api_key:
            return True
        self.send_error_json(401, "wrong API key")
        return False

    def do_GET(self):
        if not self.authorized():
            return
        if self.path.rstrip("/").endswith("/v1/models"):
            self.send_json(200, {"object": "list", "data": [
                {"id": ARGS.model, "object": "model", "owned_by": "fake"}]})
        else:
            self.send_error_json(404, "no route " + self.path)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def event(self, payload):
        text = payload if isinstance(payload, str) else json.dumps(payload)
        self.chunk(("data: " + text + "\n\n").encode())

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if not self.authorized():
            return
        if not self.path.endswith("/v1/completions"):
            self.send_error_json(404, "no route " + self.path)
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self.send_error_json(400, "body is not JSON")
            return
        with LOCK:
            COUNTER[0] += 1
            number = COUNTER[0]
            if ARGS.log:
                with open(ARGS.log, "a") as log:
                    log.write(json.dumps(body) + "\n")
        reason = check_request(body)
        if reason:
            self.send_error_json(400, reason)
            return
        if ARGS.reject_every and number % ARGS.reject_every == 0:
            self.send_error_json(429, "the queue is full", [("Retry-After", "1")])
            return

        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        created = int(time.time())
        max_tokens = body["max_tokens"]
        fail = ARGS.error_event_every and number % ARGS.error_event_every == 0
        time.sleep(ARGS.first_delay)
        sent = 0
        while sent < max_tokens:
            if fail and sent >= 2:
                self.event({"error": {"message": "engine failed mid-stream",
                                      "type": "server_error", "code": 500}})
                break
            n = min(ARGS.tokens_per_chunk, max_tokens - sent)
            sent += n
            self.event({"id": "cmpl-%d" % number, "object": "text_completion",
                        "created": created, "model": ARGS.model,
                        "choices": [{"index": 0, "text": " tok" * n, "logprobs": None,
                                     "finish_reason": "length" if sent == max_tokens else None}]})
            if sent < max_tokens:
                time.sleep(ARGS.delay)
        if not fail and not ARGS.no_usage:
            self.event({"id": "cmpl-%d" % number, "object": "text_completion",
                        "created": created, "model": ARGS.model, "choices": [],
                        "usage": {"prompt_tokens": len(body["prompt"]),
                                  "completion_tokens": max_tokens,
                                  "total_tokens": len(body["prompt"]) + max_tokens,
                                  "prompt_tokens_details": {"cached_tokens": 0}}})
        self.event("[DONE]")
        self.chunk(b"")
        self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def server_bind(self):
        # HTTPServer.server_bind asks DNS for the host's full name, which
        # hangs on a machine without a resolver.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


def exit_with_parent():
    """Ends this process once the test that started it is gone, even when
    the test crashed before it could kill the server."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main():
    threading.Thread(target=exit_with_parent, daemon=True).start()
    server = Server(("127.0.0.1", ARGS.port), Handler)
    sys.stdout.write("PORT %d\n" % server.server_address[1])
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
