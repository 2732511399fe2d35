"""``draftgate law``: evaluate the Draft Law at one point, as a table or JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def _floats(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gamma", type=int, default=8, help="draft depth (default 8)")
    parser.add_argument("--kappa", type=float, default=0.9, help="draft alignment constant (default 0.9)")
    parser.add_argument("--delta", type=float, default=0.02, help="verification overhead per draft token")
    parser.add_argument("--draft-cost", type=float, default=0.15, help="draft pass cost relative to target (d)")
    parser.add_argument("--rho", type=_floats, default=[0.95, 0.55, 0.35], help="rho_S,rho_R,rho_F")
    parser.add_argument("--mix", type=_floats, default=[0.6, 0.1, 0.3], help="w_S,w_R,w_F")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--plot", metavar="FILE.png", help="draw saving against w_S for gamma 4, 8, 16")


def evaluate(
    gamma: int, kappa: float, delta: float, d: float, rho: list[float], mix: list[float]
) -> dict[str, Any]:
    """The whole law at one point, as the JSON ``draftgate law --json`` prints."""
    from draftgate.policy import law

    drafter = law.Drafter(gamma, delta, d)
    classes = law.ClassMix.from_sequence(mix)
    rhos = law.ClassRho.from_sequence(rho)
    mixture = law.predict_mixture(classes, rhos, kappa, drafter)
    spans = law.predict_spans(classes, rhos, kappa, drafter)
    eps_exact = law.break_even_eps(drafter)
    eps_closed = law.break_even_eps_closed_form(drafter)
    alpha_star = law.break_even_alpha(drafter)

    def saving_at(eps: float | None) -> float | None:
        return None if eps is None else law.saving_from_tau(law.tau(1.0 - eps, gamma), drafter)

    return {
        "alpha": mixture.alpha,
        "tau": mixture.tau,
        "saving": mixture.saving,
        "speedup": mixture.speedup,
        "net_cost_ratio": mixture.net_cost_ratio,
        "span": {
            "saving": spans.saving,
            "speedup": spans.speedup,
            "net_cost_ratio": spans.net_cost_ratio,
            "alpha": spans.alpha,
            "tau": spans.tau,
            "break_even_ws": _ws_json(law.break_even_ws_spans(spans.tau, drafter, classes)),
        },
        "marginal_tau_per_ws": {
            "exact": law.marginal_tau_per_ws(classes, rhos, kappa, gamma),
            "paper": law.marginal_tau_per_ws_paper(rhos, kappa, gamma),
        },
        "alpha_star": {"exact": alpha_star, "closed_form": None if eps_closed is None else 1 - eps_closed},
        "eps_star": {"exact": eps_exact, "closed_form": eps_closed},
        "saving_at_threshold": {"exact": saving_at(eps_exact), "closed_form": saving_at(eps_closed)},
        "break_even_ws": {
            "exact": _ws_json(law.break_even_ws(eps_exact, kappa, rhos, classes)),
            "closed_form": _ws_json(law.break_even_ws(eps_closed, kappa, rhos, classes)),
        },
        "parameters": {
            "gamma": gamma, "kappa": kappa, "delta": delta, "draft_cost": d,
            "rho": dict(zip("srf", rho)), "mix": dict(zip("srf", mix)),
        },
    }


def _ws_json(ws: Any) -> dict[str, Any]:
    return {"value": ws.value, "clipped": ws.clipped, "raw": ws.raw, "reason": ws.reason}


def _fmt(value: float | None, pct: bool = False) -> str:
    if value is None:
        return "undefined"
    return f"{value:+.1%}" if pct else f"{value:.4f}"


def _ws_text(ws: dict[str, Any]) -> str:
    if ws["value"] is None:
        return f"undefined ({ws['reason']})"
    text = f"{ws['value']:.4f}"
    return f"{text} (clipped {ws['clipped']}: {ws['reason']})" if ws["clipped"] else text


def render_table(result: dict[str, Any]) -> str:
    p = result["parameters"]
    span = result["span"]
    lines = [
        f"Draft Law at gamma={p['gamma']} kappa={p['kappa']} delta={p['delta']} d={p['draft_cost']}",
        f"  rho  S/R/F = {p['rho']['s']}/{p['rho']['r']}/{p['rho']['f']}   "
        f"mix  S/R/F = {p['mix']['s']}/{p['mix']['r']}/{p['mix']['f']}",
        "",
        f"{'':28}{'mixture (paper)':>18}{'spans (default)':>18}",
        f"{'acceptance alpha':28}{_fmt(result['alpha']):>18}"
        f"{'S ' + _fmt(span['alpha']['s']) + ' F ' + _fmt(span['alpha']['f']):>18}",
        f"{'tau (accepted per round)':28}{_fmt(result['tau']):>18}"
        f"{'S ' + _fmt(span['tau']['s']) + ' F ' + _fmt(span['tau']['f']):>18}",
        f"{'saving':28}{_fmt(result['saving'], True):>18}{_fmt(span['saving'], True):>18}",
        f"{'speedup':28}{result['speedup']:>17.3f}x{span['speedup']:>17.3f}x",
        f"{'net cost ratio c_net/c_T':28}{_fmt(result['net_cost_ratio']):>18}{_fmt(span['net_cost_ratio']):>18}",
        "",
        f"{'':28}{'exact':>18}{'closed form':>18}",
        f"{'break-even eps*':28}{_fmt(result['eps_star']['exact']):>18}"
        f"{_fmt(result['eps_star']['closed_form']):>18}",
        f"{'saving at that threshold':28}{_fmt(result['saving_at_threshold']['exact'], True):>18}"
        f"{_fmt(result['saving_at_threshold']['closed_form'], True):>18}",
        f"break-even w_S (mixture, exact):       {_ws_text(result['break_even_ws']['exact'])}",
        f"break-even w_S (mixture, closed form): {_ws_text(result['break_even_ws']['closed_form'])}",
        f"break-even w_S (spans, exact):         {_ws_text(span['break_even_ws'])}",
        f"marginal dtau/dw_S: exact {result['marginal_tau_per_ws']['exact']:.4f}, "
        f"paper's alpha->1 form {result['marginal_tau_per_ws']['paper']:.4f}",
        "The gate decides on the exact root; the closed form is shown for comparison only.",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from draftgate.cli_error import CliError

    try:
        result = evaluate(args.gamma, args.kappa, args.delta, args.draft_cost, args.rho, args.mix)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if args.plot:
        from draftgate.plots import plot_law

        try:
            plot_law(args.plot, args.kappa, args.delta, args.draft_cost, args.rho, args.mix)
        except ImportError:
            raise CliError("--plot needs matplotlib: pip install 'draftgate[plot]'") from None
        except OSError as exc:
            raise CliError(f"cannot write {args.plot}: {exc.strerror}") from None
    if args.json:
        json.dump(result, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(render_table(result))
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0
