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
import os
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

# DEFAULT_PORT is the gRPC port the internal ports below are chosen for.
DEFAULT_PORT = 19530


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="base dir for the binaries, config, data and logs")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help="gRPC port (the SDKs connect here)")
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
    #
    # A gRPC port other than 19530 moves every internal port by the same offset, so
    # that a second server (MILVUS_PORT=19630 beside one on 19530) binds none of the
    # first's: with the internal ports pinned, it failed at once on etcd's 2379.
    offset = args.port - DEFAULT_PORT
    ports = {key: config.get(key) + offset for key in config.configurable_items if key.endswith("_port")}
    ports["proxy_port"] = args.port
    ports["root_coord_port"] = ROOT_COORD_PORT + offset
    bad = [f"{key} {port}" for key, port in ports.items() if not 0 < port < 65536]
    if bad:
        ap.error(f"--port {args.port} moves the internal ports out of range: {', '.join(bad)}")
    config.update(**ports)
    if offset:
        # The embedded etcd's peer port (2380) is no setting of the package: an etcd
        # configuration file moves it, with the client port, by the same offset.
        etcd = os.path.join(args.data, "embed-etcd.yaml")
        client, peer = f"http://127.0.0.1:{ports['etcd_port']}", f"http://127.0.0.1:{2380 + offset}"
        with open(etcd, "w", encoding="utf-8") as f:
            f.write(f"listen-client-urls: {client}\nadvertise-client-urls: {client}\n"
                    f"listen-peer-urls: {peer}\ninitial-advertise-peer-urls: {peer}\n"
                    f"initial-cluster: default={peer}\n")
        # The package's template has no etcd.config.path to set: add the key.
        config.template_text = config.template_text.replace("\netcd:\n", f"\netcd:\n  config:\n    path: {etcd}\n", 1)
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
