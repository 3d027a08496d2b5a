"""The ``agilerl`` command: validate manifests, export the schema, list algorithms, evaluate,
export a policy."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from agilerl.arena.models.errors import EXIT_USER_ERROR, ConfigError
from agilerl.extras import extra_of, installed, missing_extra_error


def _validate(files: Sequence[str], quiet: bool, trust_code: bool = False) -> int:
    from agilerl.arena.models.manifest import TrainingManifest
    from agilerl.arena.models.trust import TRUST_HINT
    from agilerl.launch.env_check import check_environment
    from agilerl.launch.preflight import preflight

    failed = 0
    for path in files:
        try:
            manifest = TrainingManifest.from_file(path)
            fields = preflight(manifest, trust_code=True, source=path)
            if not fields:  # as a dry run (never importing code of the manifest)
                check_environment(manifest)
        except ConfigError as error:
            failed += 1
            print(
                error.render() if error.source else f"error: {path}: {error.render()[7:]}",
                file=sys.stderr,
            )
            continue
        if not quiet:
            env = getattr(manifest.environment, "name", type(manifest.environment).__name__)
            print(f"ok: {path}: {manifest.algorithm.name} on {env}")
        for field in fields:
            allowed = "allowed by --trust-code" if trust_code else f"a run needs {TRUST_HINT}"
            print(f"runs code: {path}: {field} ({allowed})", file=sys.stderr)
    return EXIT_USER_ERROR if failed else 0


def _schema(indent: int) -> int:
    from agilerl.arena.models.schema import manifest_schema

    print(json.dumps(manifest_schema(), indent=indent or None))
    return 0


def _algorithms() -> int:
    from rich.table import Table

    from agilerl.arena.models.registry import MANIFEST_REGISTRY
    from agilerl.logging.console import console
    from agilerl.strategies import strategy_for

    table = Table(title="Registered algorithms")
    columns = ("name", "also", "paradigm", "training loop", "trains", "env", "key defaults")
    for column in columns:
        table.add_column(column)
    names_of: dict[type, list[str]] = {}
    for name, spec_cls in MANIFEST_REGISTRY.items():
        names_of.setdefault(spec_cls, []).append(name)
    for spec_cls, names in sorted(names_of.items(), key=lambda item: item[1][0]):
        # the spelling without spaces is the one conf/algorithm uses; others are aliases
        names.sort(key=lambda n: (" " in n, n))
        strategy = strategy_for(spec_cls)
        # read from the paradigm's strategy, so it changes when a paradigm lands
        try:
            default_spec = spec_cls()
        except ValueError:  # a spec with a required field (e.g. GRPO's group_size)
            default_spec = None
        missing = [m for m in strategy.requires if not installed(m)]
        if missing:  # the paradigm's extra is not installed
            trains = f"needs the {extra_of(missing[0])} extra"
        elif strategy.unavailable_reason(default_spec) is None:
            trains = "yes"
        else:
            trains = "no"
        fields = spec_cls.model_fields
        keys = [
            k
            for k in ("lr", "lr_actor", "batch_size", "learn_step", "gamma", "group_size")
            if k in fields
        ]
        defaults = ", ".join(
            f"{k}={'required' if fields[k].is_required() else fields[k].default}" for k in keys
        )
        table.add_row(
            names[0],
            ", ".join(repr(n) for n in names[1:]),
            strategy.paradigm,
            strategy.loop_name,
            trains,
            spec_cls.env_type,
            defaults,
        )
    console().print(table)
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from agilerl.evaluate import evaluate_checkpoint

    if args.episodes < 1:
        raise ConfigError("--episodes must be at least 1")
    result = evaluate_checkpoint(
        args.checkpoint,
        episodes=args.episodes,
        video=args.video,
        env_name=args.env,
        agent=args.agent,
        seed=args.seed,
        device=args.device,
        trust_code=args.trust_code,
    )
    print(f"checkpoint: {result.checkpoint}")
    from agilerl.logging.stats import summarise

    stats = summarise(result.returns)
    print(f"episodes: {stats.n}  return: {stats.render()}")
    print(f"min {min(result.returns):.2f}  max {max(result.returns):.2f}")
    if result.agent_returns:
        print("summed over agents; per agent:")
        for name, returns in result.agent_returns.items():
            print(f"  {name}: {summarise(returns).render()}")
    if result.video:
        print(f"video: {result.video}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from agilerl.arena.models.errors import EXIT_RUN_FAILED, RunFailure
    from agilerl.deploy.exporting import export_policy

    try:
        result = export_policy(args.run, args.format, args.out, agent=args.agent)
    except RunFailure as failure:  # the written file does not act like the torch policy
        print(f"error: {failure}", file=sys.stderr)
        return EXIT_RUN_FAILED
    print(f"exported: {result.path} ({result.format}, {result.algorithm} from {result.checkpoint})")
    for spec in (*result.inputs, result.output):
        shape = ", ".join(map(str, spec["shape"]))
        print(f"  {spec['name']}: {spec['dtype']} [{shape}]")
    if result.checked:
        print(
            f"checked: the same actions as torch on {result.checked} observations "
            f"(largest difference {result.max_difference:.2g})"
        )
    elif result.note:
        print(result.note)
    print(f"description: {result.metadata}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``agilerl`` argument parser."""
    parser = argparse.ArgumentParser(prog="agilerl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="validate manifest files (exit 2 if any is invalid)")
    validate.add_argument("files", nargs="+", help="YAML or JSON manifest files")
    validate.add_argument("-q", "--quiet", action="store_true", help="print errors only")
    validate.add_argument(
        "--trust-code", action="store_true", help="the fields that run code are intended"
    )
    schema = sub.add_parser("schema", help="print the manifest's JSON schema")
    schema.add_argument("--indent", type=int, default=2, help="JSON indent (0: one line)")
    sub.add_parser("algorithms", help="list registered algorithms")
    evaluate = sub.add_parser("evaluate", help="greedy episodes of a saved agent")
    evaluate.add_argument(
        "checkpoint", help="run directory, checkpoint directory or agent .pt file"
    )
    evaluate.add_argument("--episodes", type=int, default=10, help="episodes to run")
    evaluate.add_argument("--video", default=None, help="write the episodes to this .mp4/.gif")
    evaluate.add_argument("--env", default=None, help="gymnasium id (default: the run's env)")
    evaluate.add_argument("--agent", type=int, default=None, help="population slot (default: best)")
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    evaluate.add_argument("--device", default="cpu", help="torch device")
    evaluate.add_argument(
        "--trust-code",
        action="store_true",
        help="allow an env that runs code named by the run's manifest (entrypoint, module:Id)",
    )
    export = sub.add_parser(
        "export", help="write a saved agent's deterministic policy as ONNX or TorchScript"
    )
    export.add_argument("run", help="run directory, checkpoint directory or agent .pt file")
    export.add_argument(
        "--format", choices=("onnx", "torchscript"), default="onnx", help="file format"
    )
    export.add_argument(
        "--out", default=None, help="file to write (default: <run>/export/policy.onnx or .pt)"
    )
    export.add_argument("--agent", type=int, default=None, help="population slot (default: best)")
    sweep = sub.add_parser("sweep", help="follow, summarise or rerun a multirun sweep")
    sweep_sub = sweep.add_subparsers(dest="sweep_command", required=True)
    status = sweep_sub.add_parser("status", help="every job's state (from the ledger and sacct)")
    status.add_argument("dir", help="the sweep directory (hydra.sweep.dir)")
    status.add_argument(
        "--watch",
        type=float,
        default=None,
        metavar="SECONDS",
        help="refresh until every job has ended",
    )
    summary = sweep_sub.add_parser("summary", help="jobs ranked by fitness, best overrides, plot")
    summary.add_argument("dir", help="the sweep directory")
    summary.add_argument("--no-plot", action="store_true", help="skip sweep_summary.png")
    summary.add_argument(
        "--importance",
        default="auto",
        choices=("auto", "fanova", "ped_anova", "mean_decrease_impurity", "none"),
        help="parameter importance evaluator of an Optuna sweep (auto: fanova with "
        "scikit-learn installed, else ped_anova)",
    )
    again = sweep_sub.add_parser("rerun", help="run the jobs that failed or never finished")
    again.add_argument("dir", help="the sweep directory")
    again.add_argument("--print-only", action="store_true", help="print the command only")
    return parser


def _sweep(args: argparse.Namespace) -> int:
    from agilerl.launch import sweep_report

    if args.sweep_command == "status":
        return sweep_report.show_status(args.dir, args.watch)
    if args.sweep_command == "summary":
        return sweep_report.show_summary(
            args.dir, plot=not args.no_plot, importance=args.importance
        )
    return sweep_report.rerun(args.dir, execute=not args.print_only)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agilerl`` console script."""
    from agilerl.logging.console import plain_warnings

    plain_warnings()
    args = build_parser().parse_args(argv)
    try:
        if args.command == "validate":
            return _validate(args.files, args.quiet, args.trust_code)
        if args.command == "schema":
            return _schema(args.indent)
        if args.command == "algorithms":
            return _algorithms()
        if args.command == "evaluate":
            return _evaluate(args)
        if args.command == "export":
            return _export(args)
        if args.command == "sweep":
            return _sweep(args)
    except ModuleNotFoundError as exc:  # an extra the command needs is not installed
        error = missing_extra_error(exc, f"agilerl {args.command}")
        if error is None:
            raise
        print(error.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    except ConfigError as error:
        print(error.render(), file=sys.stderr)
        return EXIT_USER_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main())
