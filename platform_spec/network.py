"""VPC mode's facts, one home for the CDK constructs, the submitter's runtime and the emulator:

* what SageMaker needs of a job's execution role to run the job in a VPC (:data:`VPC_EXECUTION_ROLE_ACTIONS`),
  granted by :meth:`platform_constructs.network.PlatformNetwork.grant_training_network_interfaces` and decided as
  the job's role when it starts by :func:`devtools.local_aws.network.network_interface_checks`. Source: SageMaker
  Developer Guide, "How to use SageMaker AI execution roles", "CreateTrainingJob API: Execution Role
  Permissions": "If you specify a private VPC for your training job, add the following permissions";
* how a job reads the platform's FSx for Lustre file system (``FileSystemDataSource``, SageMaker API Reference):
  :data:`FSX_FILE_SYSTEM_TYPE`, :data:`FSX_ACCESS_MODE`, :data:`FSX_INPUT_MODE`, written by the submitter
  (:mod:`platform_constructs.submitter.runtime.job`), required by the submitter's grant
  (:meth:`platform_constructs.fsx_lustre.FsxLustre.create_training_job_conditions`) and checked by the emulator.
"""

from __future__ import annotations

TRAINING_NETWORK_INTERFACE_CREATE = ("ec2:CreateNetworkInterface",)
"""Creating the job's network interfaces: on the job's subnets, its security groups and a new network interface
(the Service Authorization Reference's resource types for it)."""
TRAINING_NETWORK_INTERFACE_MANAGE = (
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
)
"""Letting SageMaker's instances attach the interfaces, and removing them when the job ends: on network
interfaces, whose IDs SageMaker draws."""
TRAINING_NETWORK_DESCRIBE = (
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
)
"""Reading the network: EC2's Describe actions have no resource-level permissions (``"*"``)."""
VPC_EXECUTION_ROLE_ACTIONS = (
    *TRAINING_NETWORK_INTERFACE_CREATE,
    *TRAINING_NETWORK_INTERFACE_MANAGE,
    *TRAINING_NETWORK_DESCRIBE,
)
"""Every EC2 action the execution role of a job with a ``VpcConfig`` needs, in the guide's order."""

FSX_FILE_SYSTEM_TYPE = "FSxLustre"
"""``FileSystemDataSource.FileSystemType`` of a channel on the platform's file system (botocore's enum: ``EFS``,
``FSxLustre``)."""
FSX_ACCESS_MODE = "ro"
"""``FileSystemDataSource.FileSystemAccessMode`` of every such channel: jobs read the file system, never write it
(it imports the data bucket and exports nothing; checkpoints and output go to S3); the submitter's grant allows
this mode only."""
FSX_INPUT_MODE = "File"
"""A file-system channel's ``InputMode``: SageMaker mounts the file system's directory at the channel's path."""
