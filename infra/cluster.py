"""The local Kafka of ``kafkron broker`` and ``kafkron up``: one KRaft node, or a cluster of
``BrokerSettings.count`` nodes on this machine from the same jars.

**Why every node is broker and controller.** A cluster of 3 combined nodes is 3 JVMs; one
controller and 3 brokers would be 4, on a 2-core machine where each JVM costs a core for
seconds at start and a heap always. And a lone controller is a single point of failure:
killing it leaves the brokers without anyone to move leaders or fence a dead broker, while 3
controllers keep a quorum of 2 when one dies, so a test can kill the active controller and
see the cluster carry on. (Kafka advises separate controllers for production clusters, so
that a busy broker cannot starve its controller; on one machine both share the same CPUs
anyway.)

Topics on a cluster get :func:`replication_of` its size: 3 replicas and
``min.insync.replicas`` 2, so an ``acks=all`` write is on 2 nodes before it is acknowledged
and one node may die without losing it or stopping writes. Kafka's own topics (group offsets,
transaction state) get the same (``infra/server.properties``).

Layout: a single node lives in ``home`` itself (``infra/broker.py``); a cluster's node N in
``home/node-N``, and ``home/cluster.json`` keeps the cluster id and every node's ports, which
stay the same across restarts (the controller quorum is addressed by them).
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import asdict, dataclass

from infra.broker import BrokerState, LocalBroker, Membership, free_port, new_cluster_id
from infra.settings import BrokerSettings
from streams.exceptions import BrokerError

REPLICATION_FACTOR = 3
"""Replicas of every topic on a cluster of 3 nodes or more."""


def replication_of(nodes: int) -> tuple[int, int]:
    """(replication factor, min.insync.replicas) for a cluster of ``nodes``: 3 and 2 from
    3 nodes on (one node may die), else every node and 1."""
    factor = min(REPLICATION_FACTOR, nodes)
    return factor, 2 if factor >= 3 else 1


@dataclass(frozen=True)
class NodePorts:
    """Where one node of the cluster listens: clients on ``port``, the quorum on
    ``controller_port``."""

    node_id: int
    port: int
    controller_port: int


@dataclass(frozen=True)
class ClusterState:
    """The running nodes of a local Kafka (one for a single broker)."""

    nodes: tuple[BrokerState, ...]

    @property
    def bootstrap(self) -> str:
        """Every node's address, for ``bootstrap.servers``."""
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def pids(self) -> list[int]:
        return [node.pid for node in self.nodes]


class LocalCluster:
    """``settings.count`` KRaft nodes under ``settings.home``: start, stop, status, and the
    fault tests' handles (a node to kill or restart, the active controller)."""

    def __init__(self, settings: BrokerSettings) -> None:
        self.settings = settings
        self.home = settings.home.resolve()
        self.layout_file = self.home / "cluster.json"
        # One object per node for this cluster's life: the one that started a JVM keeps its
        # process handle, so that a kill or stop here reaps it.
        self._single = LocalBroker(settings)
        self._members: list[LocalBroker] | None = None

    @property
    def multi_node(self) -> bool:
        return self.settings.count > 1

    def start(self) -> ClusterState:
        """Start every node that is not running, then wait until each answers."""
        if not self.multi_node:
            if self._cluster_nodes_running():
                raise BrokerError(
                    f"a cluster of several nodes runs from {self.home}: stop it first "
                    "('kafkron broker stop'), or start it with --brokers N"
                )
            return ClusterState((self._single.start(),))
        if self._single.running_state() is not None:
            raise BrokerError(
                f"a single broker runs from {self.home}: stop it first ('kafkron broker "
                "stop'), or give the cluster another KAFKRON_BROKER_HOME"
            )
        nodes = self.nodes()
        for node in nodes:  # refuse before any node starts, not with half of them up
            node.check_version(whole_home=self.home)
        states = [node.launch() for node in nodes]  # a node answers only once a quorum runs
        for node, state in zip(nodes, states, strict=True):
            node.wait_ready(state)
        return ClusterState(tuple(states))

    def nodes(self) -> list[LocalBroker]:
        """Every node of this home: the single broker, or the cluster's (its layout made
        and kept on first use)."""
        if not self.multi_node:
            return [self._single]
        return self._cluster_nodes(*self._layout())

    def _cluster_nodes(self, cluster_id: str, ports: list[NodePorts]) -> list[LocalBroker]:
        if self._members is None:
            self._members = self._members_of(cluster_id, ports)
        return self._members

    def _members_of(self, cluster_id: str, ports: list[NodePorts]) -> list[LocalBroker]:
        factor, min_isr = replication_of(len(ports))
        voters = ",".join(f"{p.node_id}@127.0.0.1:{p.controller_port}" for p in ports)
        membership = Membership(cluster_id, voters, factor, min_isr)
        return [
            LocalBroker(
                self.settings.model_copy(
                    update={
                        "home": self.home / f"node-{p.node_id}",
                        "port": p.port,
                        "controller_port": p.controller_port,
                    }
                ),
                node_id=p.node_id,
                membership=membership,
            )
            for p in ports
        ]

    def node(self, node_id: int) -> LocalBroker:
        """One node, to kill or restart (``LocalBroker.kill``, ``start``)."""
        for node in self.nodes():
            if node.node_id == node_id:
                return node
        raise BrokerError(f"no node {node_id} in {self.home}")

    def running_state(self) -> ClusterState | None:
        """The nodes running from this home (single or cluster), or None when none runs."""
        states = [s for s in (n.running_state() for n in self._every_node()) if s is not None]
        return ClusterState(tuple(states)) if states else None

    def running_nodes(self) -> list[tuple[LocalBroker, BrokerState | None]]:
        """What runs from this home, node by node (None: that node is down): the single
        broker, and every node of a cluster of which at least one runs."""
        found: list[tuple[LocalBroker, BrokerState | None]] = []
        single = self._single
        state = single.running_state()
        if state is not None:
            found.append((single, state))
        if self.layout_file.exists():
            nodes = self._cluster_nodes(*self._recorded_layout())
            states = [(node, node.running_state()) for node in nodes]
            if any(s is not None for _, s in states):
                found += states
        return found

    def stop(self) -> bool:
        """SIGTERM every running node at once, then wait for all under one deadline (SIGKILL
        after ``stop_grace_s``); False if none ran. At once, because a node that stops alone
        hands its partitions over first, and the last ones to stop have nobody to hand to."""
        running = [(n, s) for n in self._every_node() if (s := n.running_state()) is not None]
        for _, state in running:
            os.kill(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.settings.stop_grace_s
        for node, state in running:
            node.finish_stop(state, deadline)
        return bool(running)

    def answers(self, state: BrokerState) -> bool:
        """Whether one node answers a metadata request."""
        return self._single.answers(state.bootstrap)

    def active_controller(self) -> int | None:
        """The node id of the quorum's leader, as the running nodes' quorum state files say
        (the newest election epoch wins); None when none has one."""
        best: tuple[int, int] | None = None  # (epoch, leader)
        for node in self._every_node():
            if node.running_state() is None:
                continue
            path = node.home / "data" / "__cluster_metadata-0" / "quorum-state"
            try:
                quorum = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            leader, epoch = int(quorum.get("leaderId", -1)), int(quorum.get("leaderEpoch", -1))
            if leader >= 0 and (best is None or epoch > best[0]):
                best = (epoch, leader)
        return None if best is None else best[1]

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of every node's logs."""
        return "\n".join(node.log_tail(lines) for node in self._every_node())

    def _every_node(self) -> list[LocalBroker]:
        """The single broker and, when this home has a cluster layout, the cluster's nodes."""
        nodes = [self._single]
        if self.layout_file.exists():
            nodes += self._cluster_nodes(*self._recorded_layout())
        return nodes

    def _cluster_nodes_running(self) -> bool:
        return any(n.running_state() is not None for n in self._every_node()[1:])

    def _layout(self) -> tuple[str, list[NodePorts]]:
        """The cluster id and node ports: recorded ones (a restart keeps the quorum's
        addresses), else new ones, recorded now."""
        if self.layout_file.exists():
            cluster_id, ports = self._recorded_layout()
            if len(ports) != self.settings.count:
                raise BrokerError(
                    f"the cluster in {self.home} has {len(ports)} nodes, not "
                    f"{self.settings.count}: start it with --brokers {len(ports)}, or stop it "
                    "and delete that folder for a new one"
                )
            return cluster_id, ports
        cluster_id, ports = new_cluster_id(), self._new_ports()
        self.home.mkdir(parents=True, exist_ok=True)
        layout = {"cluster_id": cluster_id, "nodes": [asdict(p) for p in ports]}
        self.layout_file.write_text(json.dumps(layout))
        return cluster_id, ports

    def _recorded_layout(self) -> tuple[str, list[NodePorts]]:
        layout = json.loads(self.layout_file.read_text())
        return str(layout["cluster_id"]), [NodePorts(**node) for node in layout["nodes"]]

    def _new_ports(self) -> list[NodePorts]:
        count, base, cbase = self.settings.count, self.settings.port, self.settings.controller_port
        taken: set[int] = set()

        def pick(fixed: int) -> int:
            port = fixed
            while not port or port in taken:  # free_port may repeat one it gave before
                port = free_port()
            taken.add(port)
            return port

        return [
            NodePorts(
                node_id=i,
                port=pick(base + i - 1 if base else 0),
                controller_port=pick(cbase + i - 1 if cbase else 0),
            )
            for i in range(1, count + 1)
        ]
