"""``draftgate measure-ngram``: tau of vLLM's copy-based drafters, replayed exactly, beside the gate's prediction."""

from __future__ import annotations

import argparse

from draftgate.cli_error import CliError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default="both", metavar="bfcl|sharegpt|both|FILE.jsonl",
                        help="the committed BFCL and ShareGPT samples (default: both), or your own conversations "
                             "as JSONL rows of {id, messages[, tools]} whose assistant turns are the answers")
    parser.add_argument("--split", choices=("calibration", "held-out", "all"), default="held-out",
                        help="which half of the committed samples (by a hash of the id): the predictor was "
                             "fitted on calibration (default: held-out; use all for your own data)")
    parser.add_argument("--method", choices=("ngram", "suffix"), default="ngram")
    parser.add_argument("-k", "--num-speculative-tokens", type=int, default=4, dest="k",
                        help="num_speculative_tokens of the pool (default 4)")
    parser.add_argument("--lookup-min", type=int, default=None, help="prompt_lookup_min (vLLM: 5 if neither is set)")
    parser.add_argument("--lookup-max", type=int, default=None, help="prompt_lookup_max")
    parser.add_argument("--fit", action="store_true",
                        help="fit the predictor's coefficients to the calibration split at depth 4 and print them")


def run(args: argparse.Namespace) -> int:
    from draftgate.measure import ngram
    from draftgate.measure.tokenizer import qwen3
    from draftgate.policy import copying

    low, high = copying.lookup_bounds(args.lookup_min, args.lookup_max)
    if not 1 <= low <= high or not 1 <= args.k <= 64:
        raise CliError("need 1 <= --lookup-min <= --lookup-max and 1 <= -k <= 64")
    tokenizer = qwen3()
    rates, measured_at = copying.rates_for(args.method, (low, high))
    try:
        if args.fit:
            tallies = ngram.measure(ngram.pairs_of(args.data), tokenizer, args.method, 4, low, high, "calibration")
            rates = copying.fit_rates([s for tally in tallies.values() for s in tally.samples])
            measured_at = (low, high) if args.method == "ngram" else "suffix"
            print(f"fitted on the calibration split, depth 4: {measured_at!r}: {rates!r},")
        tallies = ngram.measure(ngram.pairs_of(args.data), tokenizer, args.method, args.k, low, high, args.split, rates)
    except (OSError, ValueError, KeyError) as exc:
        raise CliError(f"cannot read {args.data}: {exc}") from None
    if not tallies:
        raise CliError(f"no answers in {args.data} ({args.split} split)")
    drafter = (f"ngram, prompt_lookup_min {low}, prompt_lookup_max {high}" if args.method == "ngram"
               else "suffix decoding (bounded as docs/model.md says)")
    fitted_for = (low, high) if args.method == "ngram" else "suffix"
    print(ngram.report(tallies, [
        f"{drafter}, k={args.k}, temperature 0; {args.data}, {args.split} split",
        f"tokenizer: {tokenizer.name}",
        "predicted: the gate's, from each request's structure" + (
            "" if measured_at == fitted_for else f" (coefficients of the nearest setting measured, {measured_at})")]))
    return 0
