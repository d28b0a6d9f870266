"""Run the Milvus standalone server of the `milvus` PyPI package in the foreground.

deploy/milvus.sh starts this with the Python of its venv. Compared with the
package's own `milvus-server` command it:

- uses fixed ports and fails when one is taken, where the package quietly
  moves to the next free port (which could be another service's, say
  Kafka's 9092, before that service has bound it); its port probe also
  ignores sockets in TIME_WAIT (SO_REUSEADDR), as the server itself does;
- registers every internal component on 127.0.0.1, so nothing depends on the
  machine's network interfaces;
- writes the port of the health endpoint (/healthz) to --health-port-file;
- lives exactly as long as the server: it exits with the server's exit code,
  and SIGTERM or SIGINT stop the server.
"""

import argparse
import signal
import socket
import sys

from milvus import MilvusServer, MilvusServerConfig

COMPONENTS = ("rootCoord", "proxy", "queryCoord", "queryNode", "indexNode", "dataCoord", "dataNode")


class FixedPortsConfig(MilvusServerConfig):
    """The package's config with a strict port probe."""

    def try_bind_port(self, port):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            return sock
        except OSError:
            sock.close()
            return None

    def resolve_port(self, port_start):
        sock = self.try_bind_port(port_start)
        if sock is None:
            raise RuntimeError(f"port {port_start} is taken by another process")
        return port_start, sock


# ROOT_COORD_PORT is the root coordinator's port, below the ephemeral range.
ROOT_COORD_PORT = 19532


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="base dir for the binaries, config, data and logs")
    ap.add_argument("--port", type=int, default=19530, help="gRPC port (the SDKs connect here)")
    ap.add_argument("--health-port", type=int, default=9091, help="port of /healthz and the metrics")
    ap.add_argument("--health-port-file", required=True)
    args = ap.parse_args()

    config = FixedPortsConfig(data_dir=args.data)
    # A port given to config.update must bind, or start() fails: pin all of
    # them to the package's defaults (etcd 2379, proxy 19529/19530, query
    # coord 19531, data coord 13333, index coord 22930, nodes 21121-21124),
    # with the gRPC port from the command line, except the root coordinator's:
    # the package's 53100 lies in Linux's ephemeral range (32768-60999), where
    # any client socket on the machine (Kafka's own connections, say) may hold
    # it for a while, and then the server cannot start. 19532 is outside it.
    ports = {key: config.get(key) for key in config.configurable_items if key.endswith("_port")}
    ports["proxy_port"] = args.port
    ports["root_coord_port"] = ROOT_COORD_PORT
    config.update(**ports)
    for component in COMPONENTS:
        config.set(f"{component}.ip", "127.0.0.1")
    # The components hold their registration in the embedded etcd by a lease of
    # common.session.ttl seconds (30 by default); when a loaded machine starves the
    # renewal past it, the component exits and takes the server down. Four minutes
    # rides out the load of a whole test suite on two cores.
    config.set("common.session.ttl", 240)
    config.set("common.session.retryTimes", 120)
    server = MilvusServer(config, wait_for_started=False)
    server.webservice_port = args.health_port
    server.start()
    proc = server.server_proc
    with open(args.health_port_file, "w", encoding="utf-8") as f:
        f.write(f"{server.webservice_port}\n")
    print(
        f"milvus pid {proc.pid}: gRPC on port {args.port}, health on "
        f"http://127.0.0.1:{server.webservice_port}/healthz, logs in {args.data}/logs",
        flush=True,
    )

    def stop(signum, _frame):
        print(f"signal {signum}: stopping milvus", flush=True)
        proc.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        code = proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"milvus exited with {code}", flush=True)
    return 0 if code in (0, -signal.SIGTERM) else 1


if __name__ == "__main__":
    sys.exit(main())
