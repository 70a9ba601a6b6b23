"""The box a log ran on, as the NCCL model prices it: read from the log where it says, from the
user's flags where it cannot, and every assumption said in one line.

A log states its GPUs (the device lines: GPU name per rank, host per rank, so nodes and GPUs per
node), nccl-tests' ``-g`` (``nGpus``: one process drives that many GPUs; 1 is how ``mpirun
-np N ... -g 1``, ``srun`` and ``torchrun`` run one process per GPU) and, with
``NCCL_DEBUG=INFO``, the NCCL release and the ``NCCL_*`` variables set. What it cannot state:
the network between nodes (``--network PRESET`` or ``--nics N --nic-gbps R --fabric F``), and
NCCL variables set without ``NCCL_DEBUG=INFO`` (``--env``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from distlab.logs.nccl_tests import NcclTestsRun
from distlab.nccl.boxes import GPU_BOXES, GpuBox
from distlab.nccl.multinode import NETWORKS, Network
from distlab.nccl.versions import ResolvedVersion, resolve_nccl_version
from distlab.vocabulary import nccl_release

__all__ = ["DEVICE_BOXES", "FABRICS", "NVLS_FROM", "Setup", "algorithms_of", "box_of_device",
           "described_network", "protocols_of", "setup_of"]

DEVICE_BOXES: tuple[tuple[str, str], ...] = (
    (r"GB200", "gb200_nvl72"),
    (r"\bB200\b", "b200_sxm8"),
    (r"\bH200\b", "h200_sxm8"),
    (r"\bH100\b(?!.*(?:PCIe|NVL\b))", "h100_sxm8"),
    (r"\bA100\b.*(?:PCIe|PCIE)", "a100_pcie8"),
    (r"\bA100\b", "a100_sxm8"),
    (r"\bL40S\b", "l40s_pcie8"),
    (r"RTX PRO 6000 Blackwell", "pcie5_8"),
)
"""``nvidia-smi`` / nccl-tests device names (``NVIDIA H100 80GB HBM3``, ``NVIDIA
A100-SXM4-80GB``, ``NVIDIA A100 80GB PCIe``) and the box of :data:`~distlab.nccl.boxes.GPU_BOXES`
that holds that GPU, first match wins. A GPU with no box here (H100 PCIe and NVL, H800, H20,
A800, L4, RTX 4090 / 5090) is not priced unless the user names a box to price it as."""

FABRICS = ("ib", "roce", "efa")
"""The fabrics ``--fabric`` names: InfiniBand, RoCE v2, AWS EFA."""

NVLS_FROM = (2, 17)
"""The first NCCL release with NVLink SHARP (NVLS) allreduce (NCCL 2.17.1 release notes)."""

_ALGORITHMS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree",
               "collnetdirect": None, "collnetchain": None, "pat": None}
"""``NCCL_ALGO``'s names (``src/graph/tuning.cc`` ``ncclAlgoStr``, any case) and the model's;
``None``: an algorithm the model does not price."""
_PROTOCOLS = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}


@dataclass(frozen=True)
class Setup:
    """Everything the model needs to price one run, and what was assumed to get it.

    Attributes:
        box: the GPU box of one node (:class:`~distlab.nccl.boxes.GpuBox`).
        world_size: GPUs in the run.
        nodes: hosts in the run.
        network: the network between nodes (``None`` on one node).
        harness: ``"nccl-tests"`` (one process drives every GPU of a node, ``-g`` > 1) or
            ``"torch"`` (one process per GPU).
        release: the NCCL release and what prices it.
        env: the ``NCCL_*`` variables the run had (from the log and ``--env``).
        algorithms, protocols: what ``NCCL_ALGO`` / ``NCCL_PROTO`` / ``NCCL_NVLS_ENABLE`` and
            the release leave NCCL (``None``: NCCL's defaults).
        read: what was read from the log, in words.
        assumed: what was assumed or given by flags, in words (stand-ins named).
        unpriced: variables set that the model cannot price (their effect is not in the price).
        stand_in: the GPU a stand-in box prices ("" where the box holds the log's GPU).
    """

    box: GpuBox
    world_size: int
    nodes: int
    network: Network | None
    harness: str
    release: ResolvedVersion
    env: Mapping[str, str] = field(default_factory=dict)
    algorithms: tuple[str, ...] | None = None
    protocols: tuple[str, ...] | None = None
    read: tuple[str, ...] = ()
    assumed: tuple[str, ...] = ()
    unpriced: tuple[str, ...] = ()
    stand_in: str = ""

    @property
    def gpus_per_node(self) -> int:
        """GPUs on each node."""
        return self.world_size // self.nodes

    @property
    def scope(self) -> str:
        """The population of published tables its bands come from
        (:func:`distlab.health.bands.scope_of`)."""
        from distlab.health.bands import scope_of

        return scope_of(self.nodes, self.box.gpus)

    def line(self) -> str:
        """One line: what was read and what was assumed."""
        read = "; ".join(self.read) or "nothing"
        assumed = "; ".join(self.assumed) or "nothing"
        return f"read: {read}. assumed: {assumed}."


def box_of_device(name: str) -> str | None:
    """The box key of :data:`DEVICE_BOXES` that holds GPU ``name``, or ``None``."""
    for pattern, box in DEVICE_BOXES:
        if re.search(pattern, name):
            return box
    return None


def described_network(nics: int, nic_gbits: float, fabric: str) -> Network:
    """A network of ``nics`` ports per node of ``nic_gbits`` Gb/s each on ``fabric``.

    Args:
        nics: ports per node NCCL uses (``ibstat`` / ``NCCL_IB_HCA``), >= 1.
        nic_gbits: one port's rate, Gb/s (as NICs are sold: 100, 200, 400).
        fabric: one of :data:`FABRICS`.

    Raises:
        ValueError: naming the flag out of range (a rate given in GB/s, 12.5 for 100 Gb/s, is
            refused as below 25 Gb/s).
    """
    if fabric not in FABRICS:
        raise ValueError(f"--fabric must be one of {', '.join(FABRICS)}, got {fabric!r}")
    if not isinstance(nics, int) or nics < 1:
        raise ValueError(f"--nics must be a whole number of ports >= 1, got {nics!r}")
    if not 25 <= nic_gbits <= 800:
        raise ValueError(f"--nic-gbps is a port's rate in Gb/s (25-800: 100, 200, 400), got "
                         f"{nic_gbits!r}")
    name = {"ib": "InfiniBand", "roce": "RoCE v2", "efa": "AWS EFA"}[fabric]
    return Network("described", f"{name}, {nics} x {nic_gbits:g} Gb/s per node",
                   nic_gbits / 8.0, nics, "the user's --nics / --nic-gbps / --fabric")


def _names(value: str, table: Mapping[str, str | None], variable: str) -> tuple[str, ...]:
    """The model's names of a ``NCCL_ALGO``/``NCCL_PROTO`` value (a comma list, ``^`` to
    exclude)."""
    exclude = value.startswith("^")
    given = [v.strip().lower() for v in value.lstrip("^").split(",") if v.strip()]
    bad = [v for v in given if v not in table]
    if bad:
        raise ValueError(f"{variable}={value}: unknown {', '.join(bad)} (NCCL's are "
                         f"{', '.join(table)})")
    named = {m for v in given if (m := table[v]) is not None}
    every = {m for m in table.values() if m is not None}
    return tuple(sorted(every - named if exclude else named))


def algorithms_of(env: Mapping[str, str], *, nodes: int, release: tuple[int, int]
                  ) -> tuple[str, ...] | None:
    """The algorithms NCCL may use under ``env`` (``None``: all it would).

    NVLS needs NCCL 2.17 (:data:`NVLS_FROM`) and ``NCCL_NVLS_ENABLE`` not 0; the model names
    NVLS ``nvls`` on one node and ``nvls_tree`` across nodes.
    """
    allowed = None
    if "NCCL_ALGO" in env:
        allowed = set(_names(env["NCCL_ALGO"], _ALGORITHMS, "NCCL_ALGO"))
        if not allowed:
            raise ValueError(f"NCCL_ALGO={env['NCCL_ALGO']}: none of these is an algorithm the "
                             "model prices (ring, tree, nvls, nvlstree)")
    no_nvls = env.get("NCCL_NVLS_ENABLE", "") == "0" or release < NVLS_FROM
    if no_nvls:
        allowed = (allowed if allowed is not None else {"ring", "tree", "nvls", "nvls_tree"}) \
            - {"nvls", "nvls_tree"}
    if allowed is None:
        return None
    here = {"ring", "tree", "nvls"} if nodes == 1 else {"ring", "tree", "nvls_tree"}
    picked = tuple(sorted(allowed & here))
    if not picked:
        raise ValueError(f"NCCL_ALGO={env.get('NCCL_ALGO')} leaves no algorithm "
                         f"{'on one node' if nodes == 1 else 'across nodes'}")
    return picked


def protocols_of(env: Mapping[str, str]) -> tuple[str, ...] | None:
    """The protocols ``NCCL_PROTO`` leaves NCCL (``None``: all)."""
    if "NCCL_PROTO" not in env:
        return None
    picked = _names(env["NCCL_PROTO"], _PROTOCOLS, "NCCL_PROTO")
    if not picked:
        raise ValueError(f"NCCL_PROTO={env['NCCL_PROTO']} leaves no protocol")
    return picked


_UNPRICED = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NET_GDR_LEVEL": None,
             "NCCL_NET_GDR_READ": "0", "NCCL_IB_DISABLE": "1", "NCCL_COLLNET_ENABLE": "1"}
"""Variables whose effect the model does not hold (its paths are NVLink / PCIe peer-to-peer
and GPUDirect RDMA): a run that sets them is priced without them, and the report says so."""


def setup_of(run: NcclTestsRun, *, box: str | None = None, gpus: int | None = None,
             nodes: int | None = None, network: str | None = None, nics: int | None = None,
             nic_gbits: float | None = None, fabric: str = "ib", release: str | None = None,
             env: Sequence[str] = ()) -> Setup:
    """The :class:`Setup` of ``run``: the log's facts, then the flags for what it lacks.

    Args:
        run: one table of a log.
        box: a key of :data:`~distlab.nccl.boxes.GPU_BOXES` to price the GPUs as (a stand-in
            where the log names another GPU; required where the log names none the model holds).
        gpus, nodes: GPUs and hosts where the log has no device lines (the log wins where it
            has them; a flag that disagrees is refused).
        network: a key of :data:`~distlab.nccl.multinode.NETWORKS`; or describe the network
            with ``nics`` ports of ``nic_gbits`` Gb/s on ``fabric`` (either, across nodes).
        release: the NCCL release where the log does not print it (the log wins; both must
            agree).
        env: ``NAME=VALUE`` strings (``NCCL_ALGO=Ring``), added to what the log states.

    Raises:
        ValueError: one sentence naming the flag or fact at fault: a GPU no box holds, GPUs
            per node that differ between hosts or exceed the box, a node count that does not
            divide the GPUs, a missing or doubly given network, a bad variable.
    """
    read: list[str] = []
    assumed: list[str] = []
    stand_in = ""
    names = run.gpu_names
    if run.ranks:
        if gpus is not None and gpus != run.ranks:
            raise ValueError(f"--gpus {gpus}: the log's device lines name {run.ranks} GPUs")
        gpus = run.ranks
        hosts = run.hosts
        per_host = {h: sum(d.host == h for d in run.devices) for h in hosts}
        if len(set(per_host.values())) > 1:
            raise ValueError("GPUs per node differ between hosts ("
                             + ", ".join(f"{h} {n}" for h, n in per_host.items())
                             + "): the model prices nodes of equal size")
        if nodes is not None and nodes != len(hosts):
            raise ValueError(f"--nodes {nodes}: the log's device lines name {len(hosts)} hosts")
        nodes = len(hosts)
        read.append(f"{gpus} x {names[0] if len(names) == 1 else ' / '.join(names)} on "
                    f"{nodes} {'host' if nodes == 1 else 'hosts'}")
    else:
        if gpus is None:
            raise ValueError(f"{run.source}: the log has no device lines ('# Using devices'): "
                             "give --gpus N (and --nodes, --box)")
        nodes = nodes or 1
        assumed.append(f"{gpus} GPUs on {nodes} {'node' if nodes == 1 else 'nodes'} (flags)")
    if gpus % nodes:
        raise ValueError(f"{gpus} GPUs do not divide over {nodes} nodes")
    per_node = gpus // nodes
    found = {box_of_device(n) for n in names} if names else set()
    if box is not None:
        if box not in GPU_BOXES:
            raise ValueError(f"--box must be one of {', '.join(sorted(GPU_BOXES))}, got {box!r}")
        if names and found != {box}:
            stand_in = " / ".join(names)
            assumed.append(f"priced as {box} ({GPU_BOXES[box].name}), a stand-in for "
                           f"{stand_in}")
        elif not names:
            assumed.append(f"the box {box} ({GPU_BOXES[box].name}) (--box)")
    else:
        if not names:
            raise ValueError("the log names no GPU: give --box (one of "
                             f"{', '.join(sorted(GPU_BOXES))})")
        if None in found or len(found) != 1:
            raise ValueError(f"no box of the NCCL model holds {' / '.join(names)}: it prices "
                             f"{', '.join(sorted(GPU_BOXES))}; give --box BOX to price it as one "
                             "of them (a stand-in, said in the report)")
        box = found.pop()  # type: ignore[assignment]
    the_box = GPU_BOXES[box]  # type: ignore[index]
    if per_node > the_box.gpus_per_host and the_box.nvlink_domain == 0:
        raise ValueError(f"{per_node} GPUs per node: a {the_box.key} node holds "
                         f"{the_box.gpus_per_host}")
    if per_node < 2 and nodes == 1:
        raise ValueError("one GPU: nothing is communicated")
    if run.gpus_per_process > 1:
        harness = "nccl-tests"
        read.append(f"one process drives {run.gpus_per_process} GPUs (-g "
                    f"{run.gpus_per_process})")
    else:
        harness = "torch"
        read.append("one process per GPU (-g 1)" if run.devices else "")
    net: Network | None = None
    described = nics is not None or nic_gbits is not None
    if nodes > 1:
        if network is not None and described:
            raise ValueError("give --network or --nics/--nic-gbps, not both")
        if network is not None:
            if network not in NETWORKS:
                raise ValueError(f"--network must be one of {', '.join(sorted(NETWORKS))}, got "
                                 f"{network!r}")
            net = NETWORKS[network]
            assumed.append(f"network {net.name} (--network)")
        elif nics is not None and nic_gbits is not None:
            net = described_network(nics, nic_gbits, fabric)
            assumed.append(f"network {net.name} (flags)")
        else:
            raise ValueError(f"{nodes} nodes: the log cannot say what joins them: give "
                             "--nics N --nic-gbps RATE [--fabric ib|roce|efa] (or --network "
                             "PRESET)")
    elif network is not None or described:
        assumed.append("one node: the network flags are not used")
    if run.nccl_version:
        if release is not None and nccl_release(release).key != nccl_release(
                run.nccl_version).key:
            raise ValueError(f"--release {release}: the log says NCCL {run.nccl_version}")
        resolved = resolve_nccl_version(run.nccl_version)
        read.append(f"NCCL {run.nccl_version}")
    elif release is not None:
        resolved = resolve_nccl_version(release)
        assumed.append(f"NCCL {release} (--release)")
    else:
        resolved = resolve_nccl_version(None)
        assumed.append(f"NCCL {resolved.version.release} (the log does not print it; "
                       "NCCL_DEBUG=INFO does)")
    if resolved.note:
        assumed.append(resolved.note)
    variables = dict(run.env)
    for item in env:
        key, sep, value = item.partition("=")
        if not sep or not key.startswith("NCCL_"):
            raise ValueError(f"--env {item!r} is not NCCL_NAME=VALUE")
        variables[key] = value
    if variables:
        assumed.append("env " + " ".join(f"{k}={v}" for k, v in variables.items()))
    release_key = nccl_release(resolved.asked).key
    algorithms = algorithms_of(variables, nodes=nodes, release=release_key)
    protocols = protocols_of(variables)
    unpriced = tuple(f"{k}={v}" for k, v in variables.items()
                     if k in _UNPRICED and (_UNPRICED[k] is None or v == _UNPRICED[k]))
    if release_key < NVLS_FROM and the_box.fabric == "nvswitch" and the_box.sm >= 90:
        assumed.append(f"no NVLS before NCCL {NVLS_FROM[0]}.{NVLS_FROM[1]}")
    return Setup(the_box, gpus, nodes, net, harness, resolved, variables, algorithms, protocols,
                 tuple(r for r in read if r), tuple(assumed), unpriced, stand_in)

