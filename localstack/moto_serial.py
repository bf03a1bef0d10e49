#!/usr/bin/env python3
"""moto_serial: moto's server with conditional writes made atomic.

moto's threaded server runs every request on its own thread, and moto's
backends check a condition and then write without holding a lock. Under
concurrent requests two writers can both see "attribute_not_exists" and both
win (docs/design.md §7 measured 1-5 double winners per 100 contended keys). Sluice's
whole protocol rests on conditional writes having exactly one winner, so this
wrapper puts moto's WSGI app behind ONE lock for every request whose effect
depends on a condition or on shared queue state:

  * DynamoDB: every request whose X-Amz-Target starts with "DynamoDB"
    (PutItem, UpdateItem, TransactWriteItems, ... and reads, so a read never
    sees half of a transaction);
  * S3 conditional writes: PUT with If-None-Match or If-Match, DELETE with
    If-Match, and the multipart POSTs (CompleteMultipartUpload checks
    If-None-Match too);
  * SQS over the JSON protocol (X-Amz-Target "AmazonSQS.*"): moto's
    ReceiveMessage marks messages received without a lock, so two concurrent
    receives can hand out the same message or two batches of one FIFO group.
    A long poll (WaitTimeSeconds > 0) must not hold the lock while it waits,
    so the wrapper turns it into short polls (WaitTimeSeconds = 0), each under
    the lock, until a message arrives or the wait is over.

  * every other S3 PUT and DELETE, DeleteObjects (POST ?delete), and every
    bucket listing: moto's listing
    iterates (and deep-copies) the bucket's version lists while a write may
    change them, which crashes the listing.

Everything else (S3 GETs and HEADs of objects, the moto API) runs
concurrently, as in moto_server. S3 -> SQS notifications are sent by moto in-process during the
S3 request, so they are delivered exactly as by moto_server.

A request body is read completely before the lock is taken, so a slow client
cannot hold the lock while it trickles bytes in.

It also patches three things in moto, each guarded (a moto whose code is not
as expected is left alone, with a warning):

  * a cancelled TransactWriteItems undoes only its own items instead of
    restoring a deep copy of every table it named (only when serialised:
    under the lock the undo log is exact, and much cheaper);
  * a FIFO group whose in-flight messages expire together is redelivered in
    order (moto delivers the last one first);
  * moto's list of its own service modules is computed once, not on every
    request.
docs/platform.md lists every moto gap and what Sluice does about it.

Environment:
  SLUICE_EMULATOR_PORT       port to listen on (default 4566; -p overrides)
  SLUICE_MOTO_UNSERIALISED=1 bypass the lock: ONLY to demonstrate the failure
  SLUICE_MOTO_VERBOSE=1      log every request
"""

import argparse
import io
import json
import logging
import os
import signal
import sys
import threading
import time
import zlib

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    create_backend_app,
)

log = logging.getLogger("moto_serial")

# How often an emulated long poll looks for messages again.
LONG_POLL_INTERVAL_S = 0.1
# How long a TransactWriteItems ClientRequestToken is remembered (DynamoDB: 10 min).
TOKEN_TTL_S = 600


def read_body(environ):
    """Reads the request body completely and replaces wsgi.input with it."""
    stream = environ.get("wsgi.input")
    if stream is None:
        return b""
    length = environ.get("CONTENT_LENGTH")
    if length:
        body = stream.read(int(length))
    elif environ.get("wsgi.input_terminated"):
        body = stream.read()
    else:
        body = b""
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def set_body(environ, body):
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))


def classify(environ):
    """Returns "serial", "sqs-receive" or "" (run concurrently)."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target.startswith("DynamoDB"):
        return "serial"
    if target.startswith("AmazonSQS."):
        if target == "AmazonSQS.ReceiveMessage":
            return "sqs-receive"
        return "serial"
    method = environ.get("REQUEST_METHOD", "")
    query = environ.get("QUERY_STRING", "")
    if method == "PUT" and (
        environ.get("HTTP_IF_NONE_MATCH") or environ.get("HTTP_IF_MATCH")
    ):
        return "serial"
    if method == "DELETE" and environ.get("HTTP_IF_MATCH"):
        return "serial"
    if method in ("PUT", "DELETE") or (method == "GET" and is_bucket_listing(query)):
        # moto's ListObjectVersions deep-copies every version of the bucket
        # while a plain PUT or DELETE may change a key's version list under
        # it (seen: TypeError 'NoneType' object is not iterable, a 500).
        return "serial"
    if method == "POST" and ("uploadId=" in query or "uploads" in query):
        # CreateMultipartUpload / CompleteMultipartUpload.
        return "serial"
    if method == "POST" and "delete" in {part.split("=", 1)[0] for part in query.split("&") if part}:
        # DeleteObjects changes version lists as a DELETE does.
        return "serial"
    return ""


def is_bucket_listing(query):
    """True for ListObjectVersions (?versions), ListObjectsV2 (?list-type=2)
    and ListObjects (a bucket GET with prefix or marker parameters)."""
    names = {part.split("=", 1)[0] for part in query.split("&") if part}
    return bool(names & {"versions", "list-type", "prefix", "marker", "delimiter"})


class Captured:
    """A response produced under the lock and replayed outside it."""

    def __init__(self):
        self.status = "500 INTERNAL SERVER ERROR"
        self.headers = []
        self.body = b""

    def call(self, app, environ):
        def start_response(status, headers, exc_info=None):
            self.status, self.headers = status, list(headers)
            return lambda data: None

        result = app(environ, start_response)
        try:
            self.body = b"".join(result)
        finally:
            if hasattr(result, "close"):
                result.close()
        return self

    def replay(self, start_response):
        headers = [(k, v) for k, v in self.headers if k.lower() != "content-length"]
        headers.append(("Content-Length", str(len(self.body))))
        start_response(self.status, headers)
        return [self.body]


class SerialisingApp:
    """Runs the requests that classify() names one at a time."""

    def __init__(self, app, serialise=True):
        self.app = app
        self.serialise = serialise
        self.lock = threading.Lock()
        self.tokens = {}

    def __call__(self, environ, start_response):
        kind = classify(environ) if self.serialise else ""
        if not kind:
            return self.app(environ, start_response)
        body = read_body(environ)
        if kind == "sqs-receive":
            return self.receive(environ, body, start_response)
        with self.lock:
            captured = self.idempotent(environ, body)
        return captured.replay(start_response)

    def idempotent(self, environ, body):
        """Honours TransactWriteItems' ClientRequestToken, as DynamoDB does
        and moto does not: a retried request whose first try succeeded (the
        client timed out, the SDK sent it again) succeeds again without
        re-applying it, instead of failing on its own first write. The same
        token with another request is IdempotentParameterMismatch. Tokens
        are kept for DynamoDB's ten minutes. Runs under the lock."""
        token, request = None, None
        if environ.get("HTTP_X_AMZ_TARGET", "").endswith(".TransactWriteItems"):
            try:
                request = json.loads(body or b"{}")
                token = request.get("ClientRequestToken")
            except (ValueError, AttributeError):
                token = None
        if not token:
            return Captured().call(self.app, environ)
        now = time.monotonic()
        for t in [t for t, (_, _, at) in self.tokens.items() if now - at > TOKEN_TTL_S]:
            del self.tokens[t]
        seen = self.tokens.get(token)
        if seen is not None:
            seen_request, seen_resp, _ = seen
            # DynamoDB compares requests, not bytes: the AWS SDK for Go
            # serialises an item's attributes (a Go map) in map iteration
            # order, so a retry of the very same request can arrive with
            # its keys in another order. Parsed JSON objects compare
            # without regard to key order; lists (TransactItems) keep theirs.
            if seen_request == request:
                return seen_resp
            mismatch = Captured()
            mismatch.status = "400 BAD REQUEST"
            mismatch.body = json.dumps({
                "__type": "com.amazonaws.dynamodb.v20120810#IdempotentParameterMismatchException",
                "message": "the ClientRequestToken was used with another request",
            }).encode()
            # DynamoDB signs every response body with its CRC32; the SDK
            # checks it (and warns when it is missing).
            mismatch.headers = [
                ("Content-Type", "application/x-amz-json-1.0"),
                ("x-amz-crc32", str(zlib.crc32(mismatch.body))),
            ]
            return mismatch
        captured = Captured().call(self.app, environ)
        if captured.status.startswith("200"):
            self.tokens[token] = (request, captured, now)
        return captured

    def receive(self, environ, body, start_response):
        """Emulates a long poll by short polls, each under the lock."""
        try:
            params = json.loads(body or b"{}")
        except ValueError:
            params = None
        if not isinstance(params, dict):
            with self.lock:
                return Captured().call(self.app, environ).replay(start_response)
        try:
            wait = max(0, int(params.get("WaitTimeSeconds", 0)))
        except (TypeError, ValueError):
            wait = 0
        if wait > 20:
            wait = 0  # let moto reject the invalid value below
            short = body
        else:
            params["WaitTimeSeconds"] = 0
            short = json.dumps(params).encode()
        deadline = time.monotonic() + wait
        base = dict(environ)
        while True:
            env = dict(base)
            set_body(env, short)
            with self.lock:
                captured = Captured().call(self.app, env)
            if not captured.status.startswith("200") or time.monotonic() >= deadline:
                break
            try:
                if json.loads(captured.body or b"{}").get("Messages"):
                    break
            except ValueError:
                break
            time.sleep(LONG_POLL_INTERVAL_S)
        return captured.replay(start_response)


def patch_fifo_redelivery_order():
    """Keeps a FIFO group in order when its messages come back together.

    moto's receive_message drops an expired message from the pending set only
    when its loop reaches it, and recomputes the pending groups each time: of
    a group's messages g2, g3, g4 that all failed and expired together, g2
    and g3 are skipped (g4 still looks pending) and g4 is delivered first.
    Expiring every visible pending message of the queue before moto's loop
    runs restores SQS's order. Receives run under the lock, so the two steps
    are atomic. Returns False if moto's internals are not as expected.
    """
    try:
        from moto.sqs.models import SQSBackend
    except ImportError:
        return False
    original = getattr(SQSBackend, "receive_message", None)
    if original is None:
        return False

    def receive_message(self, queue_name, *args, **kwargs):
        queue = self.get_queue(queue_name)
        pending = getattr(queue, "pending_messages", None)
        if getattr(queue, "fifo_queue", False) and pending is not None:
            for message in [m for m in pending if m.visible]:
                pending.discard(message)
        return original(self, queue_name, *args, **kwargs)

    SQSBackend.receive_message = receive_message
    return True


def patch_transaction_rollback():
    """Makes a cancelled TransactWriteItems undo only the items it touched.

    moto backs up every table a transaction names with copy.deepcopy before
    it starts, and puts the copy back if any condition fails. That costs
    time in proportion to the table (most of a transaction's time with a few
    hundred items), and without the lock it is what loses concurrent writes.
    Under the lock, an undo log of the transaction's own items is exact: this
    snapshots each named item (a deep copy of one item), lets moto run with
    its table backup turned into a no-op, and restores the snapshots, last
    first, if moto raises. Only applied when requests are serialised; returns
    False, leaving moto as it is, if moto's code is not what this expects.
    """
    import copy as real_copy
    import inspect

    try:
        import moto.dynamodb.models as models
        from moto.dynamodb.models import DynamoDBBackend
        from moto.dynamodb.models.dynamo_type import DynamoType
        from moto.dynamodb.models.table import Table
        source = inspect.getsource(DynamoDBBackend.transact_write_items)
    except (ImportError, AttributeError, OSError, TypeError):
        return False
    if "original_table_state" not in source or "copy.deepcopy(" not in source \
            or getattr(models, "copy", None) is not real_copy:
        return False
    original = DynamoDBBackend.transact_write_items

    class KeepTables:
        """Stands in for the copy module inside moto's DynamoDB backend:
        a Table is "copied" as itself, everything else really is."""

        @staticmethod
        def deepcopy(x, memo=None):
            if isinstance(x, Table):
                return x
            return real_copy.deepcopy(x, memo)

        copy = staticmethod(real_copy.copy)

    def snapshot(backend, transact_items):
        undo = []
        for entry in transact_items:
            if not isinstance(entry, dict) or len(entry) != 1:
                continue  # moto rejects it before writing anything
            (op_type, op), = entry.items()
            table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
            if table is None:
                continue
            attrs = op.get("Item") if op_type == "Put" else op.get("Key")
            if not isinstance(attrs, dict) or table.hash_key_attr not in attrs:
                continue
            hash_value = DynamoType(attrs[table.hash_key_attr])
            range_value = None
            if table.range_key_attr is not None:
                if table.range_key_attr not in attrs:
                    continue
                range_value = DynamoType(attrs[table.range_key_attr])
            current = table.get_item(hash_value, range_value)
            undo.append((table, hash_value, range_value, real_copy.deepcopy(current)))
        return undo

    def restore(undo):
        for table, hash_value, range_value, item in reversed(undo):
            if item is None:
                table.delete_item(hash_value, range_value)
            elif range_value is not None:
                table.items[hash_value][range_value] = item
            else:
                table.items[hash_value] = item

    def transact_write_items(self, transact_items):
        undo = snapshot(self, transact_items)
        models.copy = KeepTables
        try:
            return original(self, transact_items)
        except BaseException:
            restore(undo)
            raise
        finally:
            models.copy = real_copy

    DynamoDBBackend.transact_write_items = transact_write_items
    return True


def patch_module_listing():
    """Caches moto's list of service modules.

    moto's dispatcher lists its own package directory (one listdir and a
    stat per service) to route every request: about a fifth of a DynamoDB
    request's time. The list cannot change while the server runs.
    """
    try:
        import moto.backends as backends
    except ImportError:
        return False
    listing = getattr(backends, "list_of_moto_modules", None)
    if listing is None:
        return False
    cached = tuple(listing())
    backends.list_of_moto_modules = lambda: cached
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument(
        "-p", "--port", type=int,
        default=int(os.environ.get("SLUICE_EMULATOR_PORT", "4566")),
    )
    parser.add_argument(
        "--setsid", action="store_true",
        help="lead a new session and process group, so stop.sh can end it whole",
    )
    args = parser.parse_args(argv)

    if args.setsid:
        try:
            os.setsid()
        except OSError:
            pass  # already a group leader: it owns its group anyway

    # moto builds URLs (queue URLs, presigned URLs) from MOTO_PORT.
    os.environ["MOTO_PORT"] = str(args.port)
    verbose = os.environ.get("SLUICE_MOTO_VERBOSE") == "1"
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    logging.getLogger("werkzeug").setLevel(logging.INFO if verbose else logging.WARNING)

    serialise = os.environ.get("SLUICE_MOTO_UNSERIALISED") != "1"
    if not serialise:
        log.warning("SLUICE_MOTO_UNSERIALISED=1: conditional writes are NOT atomic")

    def stop(signum, frame):
        # All state is in memory and nothing needs flushing but the log;
        # os._exit skips the interpreter's slow teardown of moto's modules.
        log.info("moto_serial stopping (signal %d)", signum)
        logging.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    if serialise and not patch_transaction_rollback():
        log.warning("could not patch moto's transaction rollback: transactions stay slow on big tables")
    if not patch_module_listing():
        log.warning("could not cache moto's module listing")
    if not patch_fifo_redelivery_order():
        log.warning("could not patch moto's SQS receive: FIFO redeliveries may come out of order")
    dispatcher = DomainDispatcherApplication(create_backend_app)
    app = SerialisingApp(dispatcher, serialise=serialise)
    log.info(
        "moto_serial listening on http://%s:%d (serialised=%s)",
        args.host, args.port, serialise,
    )
    run_simple(args.host, args.port, app, threaded=True, use_reloader=False)


if __name__ == "__main__":
    main()
