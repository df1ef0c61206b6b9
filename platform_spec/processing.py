"""Facts of ``trainctl prepare-data --remote``: the SageMaker Processing job that runs
:func:`training.prepare.prepare_data` over an S3 prefix on N CPU instances.

Read by ``trainctl`` (it builds ``CreateProcessingJob``), the trainer image's entry point
(:mod:`training.processing`), the execution role (:mod:`platform_constructs.execution_role`: write access
below :data:`PREPARED_PREFIX` only) and the emulator. Pure Python, standard library only.

Container paths: a processing job's inputs and outputs must lie below ``/opt/ml/processing``, and the job's
own description is in ``/opt/ml/config/processingjobconfig.json`` (the CreateProcessingJob request) and its
instance in ``/opt/ml/config/resourceconfig.json`` (``current_host``, ``hosts``) ("Build Your Own Processing
Container", https://docs.aws.amazon.com/sagemaker/latest/dg/build-your-own-processing-container.html).

Output layout below ``s3://DATA_BUCKET/prepared/NAME/`` (each instance writes below a part folder of its
own, named after its host, so N instances never write one key)::

    without a validation split          with one
    part-algo-1/shard-00000.bin/.json   train/part-algo-1/...     validation/part-algo-1/...
    part-algo-1/manifest.json           train/manifest.json       validation/manifest.json
    manifest.json  (written last)       (written last)

Each part's ``manifest.json`` is :mod:`training.prepare`'s. The dataset's manifest (``manifest.json`` at the
top of the train and validation channels) lists every part's shards by relative path; ``trainctl`` writes
it once, when the job has completed and every host's part manifest is there, with a conditional put that
refuses to replace one: a dataset without it is incomplete (the trainer refuses it, :mod:`training.data`).
A preparation with a ``tokenizer.json`` has one copy of it per split, beside the split's manifest (where the
export looks for it, :mod:`training.tokenizer_files`): the parts hold none, ``trainctl`` writes it from the
job's ``tokenizer`` input just before the manifest.
"""

from __future__ import annotations

MANIFEST = "manifest.json"
"""A prepared split's manifest (:mod:`training.prepare`'s, a part's, and the one over a remote preparation's
parts), beside its shards."""
TOKENIZER_FILE = "tokenizer.json"
"""The tokenizer's file: a ``--tokenizer`` input, and its copy beside each prepared split's manifest."""
SPLITS = ("train", "validation")
"""The split folders ``prepare-data --validation-fraction`` writes."""

INPUT_DATA = "data"
"""``ProcessingInputs`` ``InputName`` of the files to prepare (ShardedByS3Key)."""
INPUT_TOKENIZER = "tokenizer"
"""``InputName`` of the folder holding the one :data:`TOKENIZER_FILE` (FullyReplicated), when one is given."""
OUTPUT_DATASET = "dataset"
"""``ProcessingOutputConfig`` ``OutputName`` of the dataset."""

PREPARED_PREFIX = "prepared/"
"""Key prefix of the data bucket that processing jobs write datasets under (and nothing else)."""

INPUT_DIR = "/opt/ml/processing/input/data"
"""Where the job's ``data`` input (the S3 prefix, ShardedByS3Key) is staged in each container."""
TOKENIZER_DIR = "/opt/ml/processing/input/tokenizer"
"""Where the ``tokenizer`` input (one ``tokenizer.json``, FullyReplicated) is staged."""
OUTPUT_DIR = "/opt/ml/processing/output"
"""The folder each container writes its part below; uploaded to the dataset's prefix."""
CONFIG_DIR = "/opt/ml/config"
"""``processingjobconfig.json`` and ``resourceconfig.json`` (AWS's layout, module docstring)."""

ENTRY_POINT = ("python", "-m", "training.processing")
"""``AppSpecification.ContainerEntrypoint``: the trainer image's preparation entry point."""

LOG_GROUP = "/aws/sagemaker/ProcessingJobs"
"""CloudWatch Logs group of processing jobs (SageMaker's)."""

DEFAULT_INSTANCE_TYPE = "ml.m5.xlarge"

INSTANCE_TYPES = (
    "ml.m5.large",
    "ml.m5.xlarge",
    "ml.m5.2xlarge",
    "ml.m5.4xlarge",
    "ml.m5.12xlarge",
    "ml.m5.24xlarge",
    "ml.c5.xlarge",
    "ml.c5.2xlarge",
    "ml.c5.4xlarge",
    "ml.c5.9xlarge",
    "ml.c5.18xlarge",
    "ml.m6i.xlarge",
    "ml.m6i.2xlarge",
    "ml.m6i.4xlarge",
    "ml.m6i.8xlarge",
    "ml.m6i.16xlarge",
    "ml.m6i.32xlarge",
    "ml.c6i.xlarge",
    "ml.c6i.2xlarge",
    "ml.c6i.4xlarge",
    "ml.c6i.8xlarge",
    "ml.c6i.16xlarge",
    "ml.c6i.32xlarge",
)
"""CPU instance types a preparation may run on: x86_64 (the trainer image's architecture), no GPU (tokenizing
uses none). Each is in botocore's ``ProcessingInstanceType`` enum (tests check it)."""


PART_PREFIX = "part-"
"""A part folder's name is this and its host's (:func:`part_name`)."""


def part_name(host: str) -> str:
    """The folder of ``host``'s part (``algo-1`` -> ``part-algo-1``)."""
    return f"{PART_PREFIX}{host}"


__all__ = [
    "CONFIG_DIR",
    "DEFAULT_INSTANCE_TYPE",
    "ENTRY_POINT",
    "INPUT_DATA",
    "INPUT_DIR",
    "INPUT_TOKENIZER",
    "INSTANCE_TYPES",
    "LOG_GROUP",
    "MANIFEST",
    "OUTPUT_DATASET",
    "OUTPUT_DIR",
    "PART_PREFIX",
    "PREPARED_PREFIX",
    "SPLITS",
    "TOKENIZER_DIR",
    "TOKENIZER_FILE",
    "part_name",
]
