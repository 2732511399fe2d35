"""The open-files limit, raised to its ceiling when the proxy starts.

Each request in flight holds two descriptors, the client's connection and the
replica's, and idle kept-alive connections hold more. containerd 2 (and so
Docker Engine 29, and Kubernetes nodes running it) no longer raises the limit
for containers, which now start with systemd's 1,024 soft and 524,288 hard.
Go raises its soft limit to the hard one at start; Python does not. A proxy
left at 1,024 in front of a few replicas with ``max_num_seqs`` 256 runs out at
about 500 requests in flight, and then ``accept()`` fails: new clients are
turned away until connections close. The hard limit is the operator's word on
what the process may use, so the proxy takes it, and ``process_max_fds`` says
what it got.
"""

from __future__ import annotations

import resource

# With no hard limit, a ceiling no proxy needs and every kernel accepts.
_UNLIMITED_CEILING = 1 << 20


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard one; returns the soft limit before and after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _UNLIMITED_CEILING if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= target:
        return soft, soft
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):  # a platform with a lower ceiling of its own (macOS): keep what we have
        return soft, soft
    return soft, target
