"""``trainctl train``: run the trainer locally through the container's entry point.

Lays out ``--base-dir`` (default: ``$SAGEMAKER_BASE_DIR``, as in the container;
resolved once) like ``/opt/ml`` (``hyperparameters.json`` with string values,
``resourceconfig.json``, ``inputdataconfig.json``, the ``train`` channel linked
to ``--data``; nothing the user put there is removed or replaced) and runs
``python -m training.entrypoint train`` with ``SAGEMAKER_BASE_DIR`` set: the
code path of a SageMaker job. Running it again on the same directory resumes
from the newest complete checkpoint (the hyperparameters of the previous run
are reused unless flags change them).

Like a supervisor, it relays SIGINT (Ctrl-C), SIGTERM and SIGHUP (a closed
terminal; relayed as SIGTERM) to the run and exits only once the workers
have saved their checkpoint and stopped; a second signal kills them without
saving. Its output, and the run's, outlive a closed terminal. What it
reports comes from the trainer's status record (the step it stopped after
and saved) and from the checkpoints (the one a restart resumes: the newest
that verifies). When the run is refused because the checkpoint belongs to
another run, the previous run's settings (``input/config/*.json``, the train
channel link) are put back, so the same command without the new flags
resumes. Exit status: the run's (0 finished or stopped by
``--stop-at-step``; 1 failed), 2 bad arguments, base directory or earlier
``hyperparameters.json``, 128 + the signal number after a relayed SIGHUP
(129), SIGINT (130) or SIGTERM (143).

Examples::

    trainctl prepare-data --output data/pydocs --python-docs
    trainctl train --base-dir runs/tiny --data data/pydocs --model gpt-tiny --precision bf16 \\
        --batch-size 8 --seq-length 128 --max-steps 200
    trainctl train --base-dir runs/tiny --python-docs --model gpt-tiny --max-steps 50 --stop-at-step 20
    trainctl train --base-dir runs/mine --python-docs --model-config my-llama/config.json --precision fp32
    trainctl train --base-dir runs/ft --data data/fineweb --init-from Llama-3.2-1B --precision bf16
    trainctl train --base-dir runs/tiny --python-docs --model gpt-tiny --tensorboard runs/tb  # tensorboard --logdir runs/tb

This module parses the arguments; :mod:`trainctl.local_train` runs and reports.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = (
    "Run the trainer locally through the container's entry point, on a directory laid out like /opt/ml. "
    "Ctrl-C (or SIGTERM) stops it as SageMaker does: it exits once the workers have saved a checkpoint "
    "(exit 130 / 143); a second Ctrl-C kills them without saving."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from platform_spec.hyperparameters import SPECS

    parser.add_argument(
        "--base-dir",
        type=Path,
        default=None,
        help="directory laid out like /opt/ml (created; default: $SAGEMAKER_BASE_DIR)",
    )
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--data", type=Path, help="token shards (trainctl prepare-data) for the train channel")
    data.add_argument(
        "--python-docs",
        action="store_true",
        help="use CPython's documentation topics (byte-level tokens) as the train channel",
    )
    parser.add_argument("--nproc", type=int, default=2, help="processes per host when there is no GPU (default 2)")
    parser.add_argument(
        "--stop-at-step",
        type=int,
        default=None,
        help="send SIGTERM once this step is logged, as a SageMaker stop does; the trainer finishes the step "
        "in flight, so it reports the step it really stopped after (run again to resume)",
    )
    parser.add_argument(
        "--model-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="the model's shape from a Hugging Face config.json (model_type llama, mistral, qwen2 or qwen3; "
        "transformers 4 or 5 form): the family's custom shape; content the trainer does not implement (a sliding "
        "window shorter than --seq-length, another RoPE type) is refused with the key named, and so is a shape flag given too",
    )
    parser.add_argument(
        "--init-from",
        type=Path,
        default=None,
        metavar="DIR",
        help="start from the weights of a Hugging Face model folder (config.json and model.safetensors, or "
        "sharded model-*.safetensors with model.safetensors.index.json), linked as the init_from channel; its "
        "config.json gives the model's shape. A resume starts from the run's checkpoint instead",
    )
    parser.add_argument(
        "--tensorboard",
        type=Path,
        default=None,
        metavar="DIR",
        help="write the run's metrics as TensorBoard event files to DIR (view with tensorboard --logdir DIR), as a "
        "SageMaker job with TensorBoardOutputConfig does; a rerun without it keeps the previous run's DIR",
    )
    parser.add_argument(
        "--json-quoted",
        action="store_true",
        help="write hyperparameters.json JSON-quoted, as older SageMaker SDKs do",
    )
    hp = parser.add_argument_group("hyperparameters (the names SageMaker jobs use; default: the trainer's)")
    for name, spec in SPECS.items():  # the metavar shows the choices
        hp.add_argument(
            spec.flag,
            dest="hp_" + name,
            default=None,
            metavar=spec.metavar,
            help=f"{spec.help} (default {spec.default})",
        )


def hyperparameter_flags(args: argparse.Namespace) -> dict[str, str]:
    """The hyperparameters given as flags (``--batch-size 8`` -> ``{"batch_size": "8"}``)."""
    from platform_spec.hyperparameters import SPECS

    return {name: value for name in SPECS if (value := getattr(args, "hp_" + name)) is not None}


def run(args: argparse.Namespace) -> int:
    from trainctl.local_train import train

    return train(
        args.base_dir,
        hyperparameter_flags(args),
        data=args.data,
        python_docs=args.python_docs,
        nproc=args.nproc,
        stop_at_step=args.stop_at_step,
        json_quoted=args.json_quoted,
        model_config=args.model_config,
        init_from=args.init_from,
        tensorboard=args.tensorboard,
    )
