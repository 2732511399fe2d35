"""The traffic a command replays, as ``--mix`` and ``--traffic`` give it, checked before any work."""

from __future__ import annotations

from collections.abc import Sequence

from draftgate.cli_error import CliError


def checked(mix_text: str | None, traffic: str | None,
            splits: Sequence[str] = ("calibration", "verdict")) -> dict[str, float] | None:
    """The weights ``--mix`` gives (None without it), once ``--traffic``'s file has been read and
    found to hold something of each of ``splits`` the weights draw: a file that cannot be replayed
    fails in one line before minutes of work."""
    from draftgate.workloads import mix
    from draftgate.workloads.traffic_file import TrafficFileError

    try:
        weights = mix.parse_mix(mix_text) if mix_text is not None else None
    except mix.MixError as exc:
        raise CliError(f"--mix: {exc}") from None
    if traffic:
        try:
            drawn = mix.weights_for(weights, traffic)
            for split in splits:
                next(mix.stream(split, 0, drawn, traffic))  # type: ignore[arg-type]
        except (TrafficFileError, mix.MixError) as exc:
            raise CliError(f"--traffic: {exc}") from None
    return weights
