#!/usr/bin/env python3
"""A small S3-compatible server on 127.0.0.1 that misbehaves on purpose, for the object-store fault
tests (odd_object_store.sh). It serves DIR/BUCKET/KEY files path-style (HEAD, ranged GET,
ListObjectsV2), checks no signature, and in one --mode breaks one rule of the protocol:
  normal        behaves
  ignore-range  answers a ranged GET with 200 and the whole object (as some proxies do)
  stall         GETs after the first --after answer nothing until --stall-s has passed
  flaky         every other GET (and HEAD) fails: a 500, then a body cut short, in turn
  list-loop     listings say IsTruncated=true with the same continuation token forever
  list-notoken  listings say IsTruncated=true and give no continuation token
It writes the port it listens on to --port-file and stops after --lifetime-s."""
import argparse
import http.server
import os
import socketserver
import sys
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--mode", default="normal")
    ap.add_argument("--after", type=int, default=0, help="stall: GETs answered before stalling")
    ap.add_argument("--stall-s", type=float, default=30.0)
    ap.add_argument("--lifetime-s", type=float, default=240.0)
    o = ap.parse_args()
    state = {"gets": 0, "odd": 0}
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def path_of(self):
            u = urllib.parse.urlsplit(self.path)
            parts = urllib.parse.unquote(u.path).lstrip("/").split("/", 1)
            return parts[0], (parts[1] if len(parts) > 1 else ""), urllib.parse.parse_qs(u.query)

        def reply(self, code, body=b"", headers=None, length=None):
            self.send_response(code)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def flaky_turn(self):
            """flaky: True when this request is to fail, alternating a 500 and a short body."""
            if o.mode != "flaky":
                return None
            with lock:
                state["odd"] += 1
                n = state["odd"]
            return None if n % 2 == 0 else ("500" if n % 4 == 1 else "short")

        def do_HEAD(self):
            bucket, key, _ = self.path_of()
            f = os.path.join(o.root, bucket, key)
            if self.flaky_turn():
                return self.reply(500, b"")
            if not key or not os.path.isfile(f):
                return self.reply(404)
            self.reply(200, b"", length=os.path.getsize(f))

        def do_GET(self):
            bucket, key, q = self.path_of()
            if not key:
                return self.listing(bucket, q)
            f = os.path.join(o.root, bucket, key)
            if not os.path.isfile(f):
                return self.reply(404, b"<Error><Code>NoSuchKey</Code></Error>")
            with lock:
                state["gets"] += 1
                n = state["gets"]
            if o.mode == "stall" and n > o.after:
                time.sleep(o.stall_s)
                return
            data = open(f, "rb").read()
            rng = self.headers.get("Range")
            turn = self.flaky_turn()
            if turn == "500":
                return self.reply(500, b"<Error><Code>InternalError</Code></Error>")
            if rng and o.mode != "ignore-range":
                a, b = rng.split("=")[1].split("-")
                a, b = int(a), min(int(b), len(data) - 1)
                body = data[a:b + 1]
                hdr = {"Content-Range": f"bytes {a}-{b}/{len(data)}"}
                if turn == "short":  # promise the whole range, send half, close
                    self.reply(206, body[: len(body) // 2], hdr, length=len(body))
                    self.close_connection = True
                    return
                return self.reply(206, body, hdr)
            self.reply(200, data)

        def listing(self, bucket, q):
            prefix = q.get("prefix", [""])[0]
            if o.mode == "list-notoken":
                return self.reply(200, b"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")
            if o.mode == "list-loop":
                body = ("<ListBucketResult><IsTruncated>true</IsTruncated>"
                        "<NextContinuationToken>again</NextContinuationToken></ListBucketResult>").encode()
                return self.reply(200, body)
            base = os.path.join(o.root, bucket)
            items = []
            for dirpath, _, files in os.walk(base):
                for name in files:
                    k = os.path.relpath(os.path.join(dirpath, name), base)
                    if k.startswith(prefix):
                        items.append(f"<Contents><Key>{escape(k)}</Key><Size>{os.path.getsize(os.path.join(dirpath, name))}</Size></Contents>")
            body = ("<ListBucketResult><IsTruncated>false</IsTruncated>" + "".join(sorted(items)) + "</ListBucketResult>").encode()
            self.reply(200, body)

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        allow_reuse_address = True

        def handle_error(self, request, client_address):
            pass  # a client that gave up (a timeout) resets its connection: expected here

    srv = Server(("127.0.0.1", 0), Handler)
    with open(o.port_file + ".tmp", "w") as pf:
        pf.write(str(srv.server_address[1]))
    os.replace(o.port_file + ".tmp", o.port_file)
    threading.Timer(o.lifetime_s, srv.shutdown).start()
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
