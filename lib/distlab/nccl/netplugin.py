"""What AWS's NCCL net plugin (aws-ofi-nccl) does to a run that NCCL's own model does not see.

Read from github.com/aws/aws-ofi-nccl at ``v1.18.0`` (the file and line beside each; the same
code from ``v1.14.0`` on unless said), and the libfabric EFA provider it runs on
(github.com/ofiwg/libfabric). Three mechanisms, each a stated constant:

- **NCCL_PROTO=simple on p4d / p4de** (:data:`SENDRECV_PROTOCOLS`). On those instances the
  plugin runs its SENDRECV protocol (``src/platform-aws.cpp`` ``platform_data_map``, lines
  83-107: ``default_protocol = PROTOCOL::SENDRECV``). At endpoint set-up it asks libfabric for
  ``FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES`` (lines 783-785); when the endpoint cannot
  promise 128-byte in-order delivery it sets ``NCCL_PROTO=simple`` unless the user set
  ``NCCL_PROTO`` (lines 850-866, ``nccl_net_ofi_configure_nccl_proto_simple`` in
  ``src/nccl_ofi_net.cpp`` line 1117: "Need to force simple protocol"). libfabric grants it only
  where the device's queue pair delivers RDMA reads 128-byte aligned in order
  (``prov/efa/src/rdm/efa_rdm_ep_fiops.c`` at ``v1.22.0``, lines 1762-1774), which EFA v1 does
  not: aws/aws-ofi-nccl#715 (aws-ofi-nccl 1.11.0, libfabric 1.22, p4d.24xlarge) logs
  "Setting FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES not supported" then "Setting
  NCCL_PROTO to "simple"". NCCL then has no LL or LL128: every size runs Simple.
- **Sub-threshold messages on one rail** (:func:`stripes`, :func:`stripe_delay_us`). The RDMA
  protocol (p5 and later) groups a GPU's EFA ports into one NCCL device and its threshold
  scheduler (``src/nccl_ofi_scheduler.cpp`` ``get_num_stripes``, lines 46-63) splits a message
  over ``ceil(size / min_stripe_size)`` ports, at most the device's, rounded down to a divisor
  of them; ``OFI_NCCL_MIN_STRIPE_SIZE`` defaults to 128 KiB (``include/nccl_ofi_param.h`` line
  177; 64 KiB in aws/aws-ofi-nccl#878, reverted by #937 before v1.16.0). NCCL hands the plugin
  one step of one channel per ``isend`` (NVIDIA/nccl ``v2.28.9-1`` ``src/transport/net.cc``
  line 1322: ``size = connFifo[buffSlot].size``), so a step under 128 KiB crosses on one
  100 Gb/s port, 256 KiB on two, 512 KiB on four (p5). Consecutive messages rotate over the
  ports (``rr_counter``), so several in flight still fill the device: what a small message
  loses is its own time on the wire, paid once per network hop of the pipeline's fill.
- **The NVLS chunk** (:data:`PLUGIN_NVLS_CHUNK_BYTES`). On p5 and later the plugin sets
  ``NCCL_NVLS_CHUNKSIZE`` and ``NCCL_NVLSTREE_MAX_CHUNKSIZE`` to 512 KiB unless the user set
  them (``src/platform-aws.cpp`` lines 137-141; by ``setenv`` from ``v1.8.0-aws``, commit
  03ead71a "aws: Restore NCCL_NVLSTREE_MAX_CHUNKSIZE to 512KiB"). NCCL's NVLS-Tree chunk starts
  there instead of 128 KiB and is not capped at 64 KiB from 4 nodes on (``src/enqueue.cc``
  lines 2056-2069, ``calcCollChunking``).

Not modelled (read, stated in ``docs/research/2026-11-27-nccl-misses.md``): the plugin's
``NCCL_BUFFSIZE=8388608`` on p4d, p4de and p5 (from ``v1.16.0``; it doubles Simple's step, which
changes a step count, not a bandwidth, in this model) and ``OFI_NCCL_EAGER_MAX_SIZE`` (8 KiB:
larger messages wait for the receiver's control message).
"""

from __future__ import annotations

import math

from distlab.nccl.per_size import LL128_LINE_ELEMS

__all__ = ["PLUGIN_MIN_STRIPE_BYTES", "PLUGIN_NVLS_CHUNK_BYTES", "SENDRECV_PROTOCOLS",
           "stripe_delay_us", "stripes", "wire_bytes"]

PLUGIN_MIN_STRIPE_BYTES = 128 * 1024
"""``OFI_NCCL_MIN_STRIPE_SIZE`` default (aws-ofi-nccl ``include/nccl_ofi_param.h`` line 177 at
``v1.18.0``): a message is split over the ports of a grouped device only from this size up."""

PLUGIN_NVLS_CHUNK_BYTES = 512 * 1024
"""``NCCL_NVLS_CHUNKSIZE`` = ``NCCL_NVLSTREE_MAX_CHUNKSIZE`` as the plugin sets them on p5 and
later (aws-ofi-nccl ``src/platform-aws.cpp`` lines 137-141 at ``v1.18.0``)."""

SENDRECV_PROTOCOLS = ("Simple",)
"""``NCCL_PROTO`` as the plugin leaves it on p4d / p4de (SENDRECV protocol, no 128-byte in-order
delivery on EFA v1): see the module doc."""


def stripes(message_bytes: int, ports: int, min_stripe_bytes: int = PLUGIN_MIN_STRIPE_BYTES) -> int:
    """Ports one message is split over (aws-ofi-nccl ``get_num_stripes``): ``ceil(size /
    min_stripe)``, at least 1 and at most ``ports``, then the largest divisor of ``ports`` not
    above it."""
    n = max(1, min(math.ceil(message_bytes / min_stripe_bytes), ports))
    while ports % n:
        n -= 1
    return n


def wire_bytes(data_bytes: float, protocol: str) -> float:
    """Bytes on the wire for ``data_bytes`` of data: LL sends a 4-byte flag with every 4 bytes,
    LL128 one 8-byte flag in every 128-byte line (``NCCL_LL128_LINEELEMS``), Simple the data."""
    if protocol == "LL":
        return 2.0 * data_bytes
    if protocol == "LL128":
        return data_bytes * LL128_LINE_ELEMS / (LL128_LINE_ELEMS - 1)
    return float(data_bytes)


def stripe_delay_us(message_bytes: float, port_gbps: float, ports: int,
                    min_stripe_bytes: int = PLUGIN_MIN_STRIPE_BYTES) -> float:
    """What one message of ``message_bytes`` on the wire loses to the stripe threshold, us: its
    time on the ports it is split over less its time on all ``ports`` of the device (``0`` for
    a device of one port, or ``min_stripe_bytes`` 0: no threshold)."""
    if ports <= 1 or min_stripe_bytes <= 0 or message_bytes <= 0:
        return 0.0
    used = stripes(math.ceil(message_bytes), ports, min_stripe_bytes)
    return message_bytes / (1e3 * port_gbps) * (1.0 / used - 1.0 / ports)
