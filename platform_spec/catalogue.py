"""GPU and instance catalogue: the one source of hardware figures.

The trainer (MFU denominator), the submitter (instance and precision checks),
the stack (allowed instance types, the image's platform) and the planner
(memory verdicts, time at peak, communication) all read these tables. Which
format a GPU runs and which of its peaks applies are the precision registry's
(:mod:`platform_spec.precisions`); this module applies them to its GPUs. Pure
Python, standard library only.

Every figure carries its source in ``sources``:

* ``DIGEST`` -- ``shared/docs/seed-digest.md``, the English digest of the
  project's source documents (the Blackwell tuning guide and the AWS
  building-blocks survey). The digest itself marks some cells *lead*: public
  spec values its tables cut off; those are flagged ``(digest, lead)``.
* Vendor pages, named by title. Figures read from NVIDIA's tables as
  reproduced on third-party pages name that page; figures from vendor pages
  that could not be re-read here are marked ``unverified``.

Conventions:

* TFLOP/s are **dense** tensor-core figures per GPU (vendors often quote
  2:4-structured-sparse figures: dense = sparse / 2).
* ``fp32`` training is measured against the **TF32** dense tensor-core peak
  (PyTorch routes fp32 matmuls through TF32 when allowed; this is the usual
  MFU denominator for fp32 on tensor-core GPUs).
* fp16 peaks equal bf16 peaks on every GPU here.
* Memory in GB (10^9 bytes) as AWS and NVIDIA print it; bandwidth in TB/s
  (HBM) and GB/s (NVLink per GPU, bidirectional; EFA per instance,
  aggregate).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from platform_spec.errors import FieldError
from platform_spec.precisions import PRECISION_NAMES, get_precision

DIGEST = "seed-digest.md (building-blocks survey hardware tables)"
DIGEST_LEAD = "seed-digest.md, marked *lead* (public spec value, to be checked)"
NVIDIA_H100 = "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column), unverified in this session"
NVIDIA_H200 = "NVIDIA H200 Tensor Core GPU product page (H200 SXM column), unverified in this session"
NVIDIA_GB200_TABLE = (
    "NVIDIA GB200 NVL72 / HGX B200 specification table, 'Individual Blackwell GPU Specifications' rows "
    "(sparse; dense = / 2), as reproduced at zdszero.github.io/Computer/Artificial_Intelligence/Hardware.html"
)
KLOCKWOOD_B300 = (
    "glennklockwood.com/garden/processors/B300 (HGX B300 dense Matrix column, quoting NVIDIA); third-party, "
    "other pages quote 14 PF dense FP4"
)
AWS_P5 = "AWS 'Amazon EC2 P5 instances' page (instance specs table), unverified in this session"
AWS_P6 = "AWS 'Amazon EC2 P6 instances' page (instance specs table), unverified in this session"
AWS_P5_MEMORY = (
    "AWS 'Amazon EC2 P5 instances' page (instance specs table: instance memory), unverified in this session; the same "
    "2048 GiB for p5e/p5en in torchx's named_resources_aws.py (meta-pytorch/torchx PRs 995, 1098) and dstack's AWS "
    "offers (dstackai/dstack PR 4110: p5en.48xlarge mem=2048GB)"
)
AWS_P6_MEMORY = (
    "AWS 'Amazon EC2 P6 instances' page (instance specs table: instance memory), unverified in this session; "
    "p6-b200.48xlarge 2,048 GiB also in Red Hat OpenShift's ROSA compute-types list (openshift/openshift-docs)"
)
GB200_MEMORY = (
    "AWS 'Amazon EC2 P6 instances' page (p6e-gb200.36xlarge: 960 GiB, two NVIDIA Grace CPUs of 480 GB LPDDR5X each, "
    "NVIDIA GB200 NVL72 specification), unverified in this session"
)
PCIE_GEN5_LINK = (
    "PCIe Gen5 x16 between each GPU and the host: 128 GB/s bidirectional (NVIDIA H100/H200 SXM datasheets, "
    "'PCIe Gen5: 128GB/s'), 64 GB/s each way; P5/P6 hosts are Intel Xeon with PCIe Gen5 root ports, so a Blackwell "
    "GPU's Gen6-capable link also runs at Gen5 (unverified in this session)"
)
GB200_C2C_LINK = (
    "NVLink-C2C between each Grace CPU and its GPUs: 900 GB/s bidirectional (NVIDIA GB200 NVL72 specification), "
    "450 GB/s each way (unverified in this session)"
)
SAGEMAKER_ULTRASERVER = (
    "SageMaker API Reference, UltraServer ('An UltraServer consists of multiple instances within a shared NVLink "
    "interconnect domain'; its InstanceType: ml.p6e-gb200.36xlarge; UltraServerType 'such as ml.u-p6e-gb200x72', "
    "https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_UltraServer.html); botocore's sagemaker model "
    "(1.44): ml.p6e-gb200.36xlarge in TrainingInstanceType and ReservedCapacityInstanceType, no UltraServer type "
    "in TrainingInstanceType"
)
AWS_GB200_GRACE = (
    "AWS Containers blog 'Unlocking next-generation AI performance with Dynamic Resource Allocation on Amazon EKS "
    "and Amazon EC2 P6e-GB200' (each GB200 superchip: two Blackwell GPUs and one NVIDIA Grace CPU, an Arm CPU)"
)


class UnknownInstanceTypeError(FieldError, KeyError):
    """An instance type that is not in :data:`INSTANCES` (a :class:`FieldError` on ``instance_type``, so a
    ``ValueError``, and a ``KeyError``; names the types to use instead: :data:`TRAINABLE_INSTANCE_TYPES`)."""

    def __init__(self, instance_type: str) -> None:
        super().__init__("instance_type", instance_type, "one of " + ", ".join(TRAINABLE_INSTANCE_TYPES))


class UnsupportedHostArchitectureError(FieldError):
    """An instance type whose host CPUs the trainer image is not built for (a :class:`FieldError` on
    ``instance_type``; names the type, its architecture, the architectures built and the types the image runs on:
    ``allowed``, default :data:`TRAINABLE_INSTANCE_TYPES`)."""

    def __init__(self, instance_type: str, problem: str, allowed: Sequence[str] | None = None) -> None:
        types = TRAINABLE_INSTANCE_TYPES if allowed is None else allowed
        super().__init__("instance_type", instance_type, "one of " + ", ".join(types), detail=problem)


class UnsupportedPrecisionError(FieldError):
    """A precision the GPU cannot run (a :class:`FieldError` on ``precision``; names the GPU and the
    precisions it supports; ``gpu`` holds the GPU's name)."""

    def __init__(self, precision: str, gpu: str, allowed: tuple[str, ...]) -> None:
        self.gpu = gpu
        super().__init__(
            "precision", precision, "one of " + ", ".join(allowed), detail=f"{precision} is not supported on {gpu}"
        )


@dataclass(frozen=True)
class GPUSpec:
    """One GPU model.

    Attributes:
        name: catalogue name, e.g. ``"B200"``.
        hbm_gb: HBM capacity per GPU, GB (10^9 B).
        hbm_bandwidth_tb_s: HBM bandwidth per GPU, TB/s.
        tf32_tflops: dense TF32 tensor-core TFLOP/s (the fp32 training peak).
        bf16_tflops: dense bf16/fp16 TFLOP/s.
        fp8_tflops: dense fp8 TFLOP/s (also mxfp8 on Blackwell); ``None`` if unsupported.
        fp4_tflops: dense fp4 TFLOP/s (nvfp4); ``None`` if unsupported.
        compute_capability: ``(major, minor)`` as ``torch.cuda.get_device_capability`` reports;
            which precisions it runs is :meth:`platform_spec.precisions.Precision.supported_by`.
        device_names: regular expressions matched (case-insensitive) against
            ``torch.cuda.get_device_name()``.
        sources: where each figure comes from.
    """

    name: str
    hbm_gb: float
    hbm_bandwidth_tb_s: float
    tf32_tflops: float
    bf16_tflops: float
    fp8_tflops: float | None
    fp4_tflops: float | None
    compute_capability: tuple[int, int]
    device_names: tuple[str, ...]
    sources: dict[str, str]

    @property
    def fp16_tflops(self) -> float:
        """Dense fp16 TFLOP/s (equal to bf16 on these GPUs)."""
        return self.bf16_tflops


@dataclass(frozen=True)
class InstanceSpec:
    """One SageMaker instance type (or UltraServer).

    Attributes:
        instance_type: SageMaker name, e.g. ``"ml.p6-b200.48xlarge"``.
        gpu: key of :data:`GPUS`.
        gpus_per_instance: GPUs in one instance (UltraServer: in the whole server).
        gpu_memory_gb: total HBM of the instance, GB (as AWS prints it).
        nvlink_bandwidth_gb_s: NVLink bandwidth per GPU, GB/s, bidirectional
            (0 for a single-GPU instance: no peer to talk to).
        nvlink_domain_gpus: GPUs reachable over NVLink without EFA.
        efa_version: EFA generation (2, 3, 4).
        efa_bandwidth_gb_s: aggregate EFA network bandwidth of the instance, GB/s.
        local_nvme_tb: local NVMe instance store, TB raw (``None`` where not known).
        sources: where each figure comes from.
        host_memory_gib: the host's memory (system RAM), GiB as AWS prints it; ``None`` for an UltraServer (see
            :attr:`host`). Staging an asynchronous checkpoint copies the host's share of it here (``planner.checkpoint``).
        host_link_gb_s: GPU-to-host bandwidth per GPU, each way, GB/s (PCIe or NVLink-C2C): the device-to-host copy
            of a checkpoint's staging.
        cpu_architecture: the host CPUs' architecture, as OCI platforms name it
            (``"amd64"``: x86-64; ``"arm64"``: e.g. NVIDIA Grace on GB200).
        host_instance_type: for an UltraServer, the instance type of the hosts it is made of (its
            :attr:`gpus_per_host`); ``None`` for an instance type, which is its own host.
    """

    instance_type: str
    gpu: str
    gpus_per_instance: int
    gpu_memory_gb: float
    nvlink_bandwidth_gb_s: float
    nvlink_domain_gpus: int
    efa_version: int
    efa_bandwidth_gb_s: float
    local_nvme_tb: float | None
    sources: dict[str, str]
    host_memory_gib: float | None = None
    host_link_gb_s: float | None = None
    cpu_architecture: str = "amd64"
    host_instance_type: str | None = None

    @property
    def gpu_spec(self) -> GPUSpec:
        return GPUS[self.gpu]

    @property
    def host(self) -> InstanceSpec:
        """The spec of one host (one machine, one SageMaker training-job instance): an UltraServer's
        :attr:`host_instance_type`, an instance type itself."""
        return self if self.host_instance_type is None else INSTANCES[self.host_instance_type]

    @property
    def gpus_per_host(self) -> int:
        """GPUs of one host (one machine, one SageMaker training-job instance): an UltraServer's are
        those of its :attr:`host_instance_type`, an instance type's its own :attr:`gpus_per_instance`."""
        if self.host_instance_type is None:
            return self.gpus_per_instance
        return INSTANCES[self.host_instance_type].gpus_per_instance


GPUS: dict[str, GPUSpec] = {
    "H100": GPUSpec(
        name="H100",
        hbm_gb=80.0,
        hbm_bandwidth_tb_s=3.35,
        tf32_tflops=494.7,
        bf16_tflops=989.5,
        fp8_tflops=1979.0,
        fp4_tflops=None,
        compute_capability=(9, 0),
        device_names=(r"\bH100\b(?!.*\b(PCIe|NVL)\b)",),
        sources={
            "hbm_gb": DIGEST,
            "hbm_bandwidth_tb_s": DIGEST,
            "bf16_tflops": DIGEST,
            "fp8_tflops": DIGEST,
            "tf32_tflops": NVIDIA_H100 + " (989 sparse / 2)",
            "compute_capability": "CUDA C Programming Guide, compute capabilities table (sm_90)",
        },
    ),
    "H200": GPUSpec(
        name="H200",
        hbm_gb=141.0,
        hbm_bandwidth_tb_s=4.8,
        tf32_tflops=494.7,
        bf16_tflops=989.5,
        fp8_tflops=1979.0,
        fp4_tflops=None,
        compute_capability=(9, 0),
        device_names=(r"\bH200\b(?!.*\bNVL\b)",),
        sources={
            "hbm_gb": DIGEST_LEAD,
            "hbm_bandwidth_tb_s": DIGEST_LEAD,
            "bf16_tflops": DIGEST_LEAD + " (same as H100)",
            "fp8_tflops": DIGEST_LEAD + " (same as H100)",
            "tf32_tflops": NVIDIA_H200 + " (989 sparse / 2)",
            "compute_capability": "CUDA C Programming Guide, compute capabilities table (sm_90)",
        },
    ),
    "B200": GPUSpec(
        name="B200",
        hbm_gb=180.0,
        hbm_bandwidth_tb_s=7.7,
        tf32_tflops=1100.0,
        bf16_tflops=2250.0,
        fp8_tflops=4500.0,
        fp4_tflops=9000.0,
        compute_capability=(10, 0),
        device_names=(r"(?<![A-Z])B200\b",),
        sources={
            "hbm_gb": DIGEST + " (guide: 'B200 180 GB'; p6-b200 1440 GB / 8); NVIDIA table: 180 GB HBM3E",
            "hbm_bandwidth_tb_s": NVIDIA_GB200_TABLE + " (HGX B200: 7.7 TB/s; the digest's lead figure ~8)",
            "bf16_tflops": DIGEST_LEAD + "; " + NVIDIA_GB200_TABLE + " (4.5 PF sparse)",
            "fp8_tflops": DIGEST_LEAD + "; " + NVIDIA_GB200_TABLE + " (9 PF sparse)",
            "fp4_tflops": DIGEST_LEAD + "; " + NVIDIA_GB200_TABLE + " (18 PF sparse)",
            "tf32_tflops": NVIDIA_GB200_TABLE + " (HGX B200 TF32 2.2 PF sparse)",
            "compute_capability": "CUDA C Programming Guide, compute capabilities table (sm_100)",
        },
    ),
    "B300": GPUSpec(
        name="B300",
        hbm_gb=268.0,
        hbm_bandwidth_tb_s=8.0,
        tf32_tflops=1125.0,
        bf16_tflops=2250.0,
        fp8_tflops=4500.0,
        fp4_tflops=13125.0,
        compute_capability=(10, 3),
        device_names=(r"(?<![A-Z])B300\b",),
        sources={
            "hbm_gb": DIGEST + " (guide: 'B300 268 GB'; p6-b300 ~2144 GB / 8; the part is 288 GB nominal)",
            "hbm_bandwidth_tb_s": KLOCKWOOD_B300 + " (8 TB/s max)",
            "bf16_tflops": DIGEST_LEAD + " (as B200); " + KLOCKWOOD_B300,
            "fp8_tflops": DIGEST_LEAD + " (as B200); " + KLOCKWOOD_B300,
            "fp4_tflops": KLOCKWOOD_B300,
            "tf32_tflops": KLOCKWOOD_B300,
            "compute_capability": "CUDA C Programming Guide, compute capabilities table (sm_103)",
        },
    ),
    "GB200": GPUSpec(
        name="GB200",
        hbm_gb=186.0,
        hbm_bandwidth_tb_s=8.0,
        tf32_tflops=1250.0,
        bf16_tflops=2500.0,
        fp8_tflops=5000.0,
        fp4_tflops=10000.0,
        compute_capability=(10, 0),
        device_names=(r"\bGB200\b",),
        sources={
            "hbm_gb": NVIDIA_GB200_TABLE + " (186 GB HBM3E); digest: p6e-gb200.36xlarge 740 GB / 4 = 185",
            "hbm_bandwidth_tb_s": NVIDIA_GB200_TABLE + " (8 TB/s)",
            "bf16_tflops": NVIDIA_GB200_TABLE + " (5 PF sparse)",
            "fp8_tflops": NVIDIA_GB200_TABLE + " (10 PF sparse)",
            "fp4_tflops": NVIDIA_GB200_TABLE + " (20 PF sparse)",
            "tf32_tflops": NVIDIA_GB200_TABLE + " (2.5 PF sparse)",
            "compute_capability": "CUDA C Programming Guide, compute capabilities table (sm_100)",
        },
    ),
}
"""GPU models by catalogue name."""


INSTANCES: dict[str, InstanceSpec] = {
    "ml.p5.4xlarge": InstanceSpec(
        instance_type="ml.p5.4xlarge",
        gpu="H100",
        gpus_per_instance=1,
        gpu_memory_gb=80.0,
        nvlink_bandwidth_gb_s=0.0,
        nvlink_domain_gpus=1,
        efa_version=2,
        efa_bandwidth_gb_s=12.5,
        local_nvme_tb=3.84,
        host_memory_gib=256.0,
        host_link_gb_s=64.0,
        sources={
            "host_memory_gib": AWS_P5_MEMORY,
            "host_link_gb_s": PCIE_GEN5_LINK,
            "gpus": DIGEST,
            "gpu_memory_gb": DIGEST,
            "efa": DIGEST,
            "local_nvme_tb": AWS_P5,
        },
    ),
    "ml.p5.48xlarge": InstanceSpec(
        instance_type="ml.p5.48xlarge",
        gpu="H100",
        gpus_per_instance=8,
        gpu_memory_gb=640.0,
        nvlink_bandwidth_gb_s=900.0,
        nvlink_domain_gpus=8,
        efa_version=2,
        efa_bandwidth_gb_s=400.0,
        local_nvme_tb=30.72,
        host_memory_gib=2048.0,
        host_link_gb_s=64.0,
        sources={
            "host_memory_gib": AWS_P5_MEMORY,
            "host_link_gb_s": PCIE_GEN5_LINK,
            "gpus": DIGEST,
            "gpu_memory_gb": DIGEST,
            "efa_version": DIGEST,
            "efa_bandwidth_gb_s": DIGEST_LEAD + " (3200 Gbps)",
            "nvlink_bandwidth_gb_s": AWS_P5 + " (NVLink 4, 900 GB/s)",
            "local_nvme_tb": AWS_P5 + " (8 x 3.84 TB)",
        },
    ),
    "ml.p5e.48xlarge": InstanceSpec(
        instance_type="ml.p5e.48xlarge",
        gpu="H200",
        gpus_per_instance=8,
        gpu_memory_gb=1128.0,
        nvlink_bandwidth_gb_s=900.0,
        nvlink_domain_gpus=8,
        efa_version=2,
        efa_bandwidth_gb_s=400.0,
        local_nvme_tb=30.72,
        host_memory_gib=2048.0,
        host_link_gb_s=64.0,
        sources={
            "host_memory_gib": AWS_P5_MEMORY,
            "host_link_gb_s": PCIE_GEN5_LINK,
            "gpus": DIGEST,
            "gpu_memory_gb": DIGEST_LEAD,
            "efa_version": DIGEST,
            "efa_bandwidth_gb_s": DIGEST_LEAD + " (3200 Gbps)",
            "nvlink_bandwidth_gb_s": AWS_P5 + " (NVLink 4, 900 GB/s)",
            "local_nvme_tb": AWS_P5 + " (8 x 3.84 TB)",
        },
    ),
    "ml.p5en.48xlarge": InstanceSpec(
        instance_type="ml.p5en.48xlarge",
        gpu="H200",
        gpus_per_instance=8,
        gpu_memory_gb=1128.0,
        nvlink_bandwidth_gb_s=900.0,
        nvlink_domain_gpus=8,
        efa_version=3,
        efa_bandwidth_gb_s=400.0,
        local_nvme_tb=30.72,
        host_memory_gib=2048.0,
        host_link_gb_s=64.0,
        sources={
            "host_memory_gib": AWS_P5_MEMORY,
            "host_link_gb_s": PCIE_GEN5_LINK,
            "gpus": DIGEST,
            "gpu_memory_gb": DIGEST_LEAD,
            "efa_version": DIGEST,
            "efa_bandwidth_gb_s": DIGEST_LEAD + " (3200 Gbps)",
            "nvlink_bandwidth_gb_s": AWS_P5 + " (NVLink 4, 900 GB/s)",
            "local_nvme_tb": AWS_P5 + " (8 x 3.84 TB)",
        },
    ),
    "ml.p6-b200.48xlarge": InstanceSpec(
        instance_type="ml.p6-b200.48xlarge",
        gpu="B200",
        gpus_per_instance=8,
        gpu_memory_gb=1440.0,
        nvlink_bandwidth_gb_s=1800.0,
        nvlink_domain_gpus=8,
        efa_version=4,
        efa_bandwidth_gb_s=400.0,
        local_nvme_tb=30.72,
        host_memory_gib=2048.0,
        host_link_gb_s=64.0,
        sources={
            "host_memory_gib": AWS_P6_MEMORY,
            "host_link_gb_s": PCIE_GEN5_LINK,
            "gpus": DIGEST,
            "gpu_memory_gb": DIGEST,
            "efa_version": DIGEST,
            "efa_bandwidth_gb_s": DIGEST_LEAD + " (3200 Gbps)",
            "nvlink_bandwidth_gb_s": DIGEST + " (NVLink 5, 1.8 TB/s bidirectional)",
            "local_nvme_tb": DIGEST + " (8 x 3.84 TB = 30.72 TB raw)",
        },
    ),
    "ml.p6-b300.48xlarge": InstanceSpec(
        instance_type="ml.p6-b300.48xlarge",
        gpu="B300",
        gpus_per_instance=8,
        gpu_memory_gb=2144.0,
        nvlink_bandwidth_gb_s=1800.0,
        nvlink_domain_gpus=8,
        efa_version=4,
        efa_bandwidth_gb_s=800.0,
        local_nvme_tb=30.72,
        host_memory_gib=4096.0,
        host_link_gb_s=64.0,
        sources={
            "host_memory_gib": AWS_P6_MEMORY,
            "host_link_gb_s": PCIE_GEN5_LINK,
            "gpus": DIGEST,
            "gpu_memory_gb": DIGEST,
            "efa_version": DIGEST,
            "efa_bandwidth_gb_s": DIGEST_LEAD + " (6400 Gbps)",
            "nvlink_bandwidth_gb_s": DIGEST + " (NVLink 5, 1.8 TB/s bidirectional)",
            "local_nvme_tb": AWS_P6 + " (8 x 3.84 TB)",
        },
    ),
    "ml.p6e-gb200.36xlarge": InstanceSpec(
        instance_type="ml.p6e-gb200.36xlarge",
        gpu="GB200",
        gpus_per_instance=4,
        gpu_memory_gb=740.0,
        nvlink_bandwidth_gb_s=1800.0,
        nvlink_domain_gpus=72,
        efa_version=4,
        efa_bandwidth_gb_s=200.0,
        local_nvme_tb=None,
        cpu_architecture="arm64",
        host_memory_gib=960.0,
        host_link_gb_s=450.0,
        sources={
            "host_memory_gib": GB200_MEMORY,
            "host_link_gb_s": GB200_C2C_LINK,
            "gpus": DIGEST,
            "gpu_memory_gb": DIGEST,
            "efa_version": DIGEST,
            "efa_bandwidth_gb_s": DIGEST,
            "nvlink_bandwidth_gb_s": DIGEST + " (NVLink 5, 1.8 TB/s bidirectional)",
            "nvlink_domain_gpus": AWS_P6 + " (sold within UltraServers: one NVLink domain of up to 72 GPUs, 18 "
            "instances of 4); " + SAGEMAKER_ULTRASERVER,
            "local_nvme_tb": "not known (not in the digest)",
            "cpu_architecture": AWS_GB200_GRACE,
        },
    ),
}
"""SageMaker instance types (and GB200 UltraServers) by name."""


def _ultraserver(instance_type: str, host_instance_type: str, hosts: int) -> InstanceSpec:
    """An UltraServer of ``hosts`` x ``host_instance_type`` in one NVLink domain, every figure derived from its
    host's entry (the one home of the per-host EFA bandwidth, GPUs and HBM): GPUs, HBM and EFA are ``hosts`` times
    the host's, the domain is the whole UltraServer. The digest's own UltraServer rows agree (u-p6e-gb200x36: 36 GPUs,
    6.7 TB, 1800 GB/s EFA; x72: 72, 13.4 TB, 3600 GB/s; it prints the host's 740 GB as 4 x 185 where NVIDIA's
    table has 186, so 18 x 740 = 13,320 GB here against its rounded 13.4 TB)."""
    host = INSTANCES[host_instance_type]
    if host.host_instance_type is not None or hosts * host.gpus_per_instance > host.nvlink_domain_gpus:
        raise ValueError(  # pragma: no cover - a catalogue edit's mistake, caught on import
            f"platform_spec.catalogue: UltraServer {instance_type} of {hosts} x {host_instance_type}: expected an "
            f"instance type whose NVLink domain ({host.nvlink_domain_gpus} GPUs) holds {hosts} of it"
        )
    derived = f"{hosts} x {host_instance_type}'s figure (" + SAGEMAKER_ULTRASERVER + "); " + DIGEST
    return dataclasses.replace(
        host,
        instance_type=instance_type,
        host_instance_type=host_instance_type,
        gpus_per_instance=hosts * host.gpus_per_instance,
        gpu_memory_gb=hosts * host.gpu_memory_gb,
        nvlink_domain_gpus=hosts * host.gpus_per_instance,
        efa_bandwidth_gb_s=hosts * host.efa_bandwidth_gb_s,
        host_memory_gib=None,
        sources={
            **{k: v for k, v in host.sources.items() if k != "host_memory_gib"},
            "host_instance_type": SAGEMAKER_ULTRASERVER,
            "gpus": derived + f" ({hosts * host.gpus_per_instance} GPUs, one NVLink domain)",
            "gpu_memory_gb": derived,
            "efa_bandwidth_gb_s": derived,
            "nvlink_domain_gpus": derived + " (the whole UltraServer)",
        },
    )


GB200_ULTRASERVER_HOSTS: dict[str, int] = {"ml.u-p6e-gb200x36": 9, "ml.u-p6e-gb200x72": 18}
"""The GB200 UltraServers by the number of ``ml.p6e-gb200.36xlarge`` hosts (4 GPUs each) in their NVLink domain
(the digest's building-blocks table: u-p6e-gb200x36, 36 GPUs; u-p6e-gb200x72, 72 GPUs; AWS 'Amazon EC2 P6
instances' page). Their entries in :data:`INSTANCES` are derived from the host's (:func:`_ultraserver`)."""

INSTANCES.update(
    {name: _ultraserver(name, "ml.p6e-gb200.36xlarge", hosts) for name, hosts in GB200_ULTRASERVER_HOSTS.items()}
)

DEFAULT_INSTANCE_TYPE = "ml.p6-b200.48xlarge"
"""The instance type of a request that names none, and the default of ``trainctl plan``, sweeps and the
``defaultInstanceType`` context key: the guide's B200 instance (8x B200, 1440 GB HBM; digest)."""

INSTANCE_TYPES: tuple[str, ...] = tuple(INSTANCES)
"""Every catalogue instance type (argparse choices); see :data:`TRAINABLE_INSTANCE_TYPES`."""

TRAINER_IMAGE_ARCHITECTURES: tuple[str, ...] = ("amd64", "arm64")
"""CPU architectures the trainer image can be built for, as OCI platforms name them (``linux/<arch>``): the one
home of the fact, and the values of the ``imageArchitectures`` context key. ``training/Dockerfile`` builds on both
(NVIDIA's PyTorch container is published for x86-64 and arm64 SBSA; the EFA installer installs on either);
``constructs/trainer_image.py`` builds one image asset per architecture a deployment names, and the submitter
runs each job on the image of its instance's :attr:`InstanceSpec.cpu_architecture`. Every catalogue instance's
architecture is one of these (checked at import), so the planner plans every catalogue type."""

DEFAULT_IMAGE_ARCHITECTURES: tuple[str, ...] = ("amd64",)
"""The architectures a deployment builds the trainer image for when it names none (``imageArchitectures``' default):
x86-64 only, the hosts of every P5 and P6 instance but the GB200 ones. An arm64 build (GB200's NVIDIA Grace hosts)
is a second image build of about the same size, so a deployment asks for it."""


IMAGE_ARCHITECTURES_RULE = (
    '"amd64" among them (the stack\'s TrainerImageUri output and data-preparation processing jobs, on ml.m5/c5/r5 '
    "instances, run on x86-64)"
)
"""The rule every set of trainer image architectures follows beyond :data:`TRAINER_IMAGE_ARCHITECTURES`, in words
(:func:`image_architectures_problem` applies it)."""


def image_architectures_problem(architectures: Sequence[str]) -> str | None:
    """What is wrong with ``architectures`` as the architectures the trainer image is built for, phrased as what is
    expected, or None: each one of :data:`TRAINER_IMAGE_ARCHITECTURES`, each once, with ``amd64`` among them
    (:data:`IMAGE_ARCHITECTURES_RULE`; :mod:`platform_spec.processing`'s instances are x86-64). The one home of the
    rule: the stack's configuration (``imageArchitectures``), ``TrainerImageProps`` and the submitter's
    ``TRAINER_IMAGE_URIS`` (whose keys are the architectures built) apply it."""
    allowed = ", ".join(f'"{a}"' for a in TRAINER_IMAGE_ARCHITECTURES)
    expected = f"a list of {allowed}, each at most once, {IMAGE_ARCHITECTURES_RULE}"
    if (
        isinstance(architectures, str)
        or not all(isinstance(a, str) and a in TRAINER_IMAGE_ARCHITECTURES for a in architectures)
        or len(set(architectures)) != len(architectures)
        or "amd64" not in architectures
    ):
        return expected
    return None


def host_architecture_problem(
    instance_type: str, architectures: Collection[str] = TRAINER_IMAGE_ARCHITECTURES
) -> str | None:
    """Why a trainer image built for ``architectures`` cannot run on ``instance_type``'s host CPUs, or None (also
    for a type the catalogue does not know: that is refused as unknown where it matters).

    Args:
        instance_type: a SageMaker instance type (``ml.`` prefix, any case).
        architectures: the architectures the deployment's image is built for (OCI names, e.g. ``("amd64",)``);
            default: every one the image can be built for (:data:`TRAINER_IMAGE_ARCHITECTURES`).
    """
    spec = INSTANCES.get(instance_type.strip().lower())
    if spec is None or spec.cpu_architecture in architectures:
        return None
    built = ", ".join(architectures) or "no architecture"
    return (
        f"{spec.instance_type} runs {spec.cpu_architecture} host CPUs and the deployment's trainer image is built "
        f"for {built} only (imageArchitectures)"
    )


def _check_architectures() -> None:
    unknown = {
        t: i.cpu_architecture for t, i in INSTANCES.items() if i.cpu_architecture not in TRAINER_IMAGE_ARCHITECTURES
    }
    if unknown:  # pragma: no cover - a catalogue edit's mistake, caught on import
        raise ValueError(
            f"platform_spec.catalogue.INSTANCES: cpu_architecture {unknown}; expected one of "
            + ", ".join(TRAINER_IMAGE_ARCHITECTURES)
        )


_check_architectures()

TRAINABLE_INSTANCE_TYPES: tuple[str, ...] = tuple(t for t in INSTANCE_TYPES if host_architecture_problem(t) is None)
"""Catalogue instance types the trainer image can be built for (host CPU architecture in
:data:`TRAINER_IMAGE_ARCHITECTURES`; today every one): what the planner plans. The submitter accepts and the
stack allows those of them whose architecture the deployment builds (:func:`deployable_instance_types`), each
further limited to what ``CreateTrainingJob`` accepts."""


def deployable_instance_types(accepted: Collection[str], architectures: Collection[str]) -> tuple[str, ...]:
    """The instance types a deployment may allow: :data:`TRAINABLE_INSTANCE_TYPES` (in catalogue order) that
    ``accepted`` holds and whose host CPUs run an image of ``architectures``.

    Args:
        accepted: the instance types ``CreateTrainingJob`` accepts (SageMaker's ``TrainingInstanceType``
            enum, read from botocore's model by the submitter's runtime, which this pure module cannot
            import: ``config.default_allowed_instance_types``). The GB200 UltraServer types are not
            among them (a training plan reserves UltraServers; its jobs run on their ``ml.p6e-gb200.36xlarge``
            hosts).
        architectures: the architectures the deployment builds the trainer image for (``imageArchitectures``).
    """
    return tuple(
        t for t in TRAINABLE_INSTANCE_TYPES if t in accepted and host_architecture_problem(t, architectures) is None
    )


def get_instance(instance_type: str) -> InstanceSpec:
    """The catalogue entry for ``instance_type`` (``"p5.48xlarge"`` is read as ``"ml.p5.48xlarge"``).

    Raises:
        UnknownInstanceTypeError: (a ``KeyError`` and ``ValueError``) naming the allowed types.
    """
    key = instance_type.strip().lower()
    if not key.startswith("ml."):
        key = "ml." + key
    try:
        return INSTANCES[key]
    except KeyError:
        raise UnknownInstanceTypeError(instance_type) from None


def get_trainable_instance(
    instance_type: str, architectures: Collection[str] = TRAINER_IMAGE_ARCHITECTURES
) -> InstanceSpec:
    """:func:`get_instance`, refusing a type whose host CPUs an image of ``architectures`` cannot run on
    (:func:`host_architecture_problem`): the lookup for anything that will run the trainer.

    Args:
        architectures: the architectures the trainer image is built for; default: every one it can be
            (:data:`TRAINER_IMAGE_ARCHITECTURES`: what the planner plans).

    Raises:
        UnknownInstanceTypeError: not in the catalogue.
        UnsupportedHostArchitectureError: e.g. a GB200 type (arm64) for an image built for amd64 only; names the
            reason and :data:`TRAINABLE_INSTANCE_TYPES`.
    """
    instance = get_instance(instance_type)
    problem = host_architecture_problem(instance.instance_type, architectures)
    if problem is not None:
        allowed = [t for t in TRAINABLE_INSTANCE_TYPES if host_architecture_problem(t, architectures) is None]
        raise UnsupportedHostArchitectureError(instance.instance_type, problem, allowed)
    return instance


INFRA_CHECK_SOURCES = (
    "SageMaker API Reference, InfraCheckConfig ('A SageMaker-provided health check tests the health of instance "
    "hardware and cluster network connectivity', https://docs.aws.amazon.com/sagemaker/latest/APIReference/"
    "API_InfraCheckConfig.html); aws/sagemaker-training-toolkit PR 190, 'Initial change for Sagemaker provided health "
    "check' ('DCGM diagnostic, NCCL test and EFA checker', tested on P4d; its health_check.py runs them on the "
    "toolkit's SM_EFA_NCCL_INSTANCES, NVIDIA GPU instances with EFA); aws/deep-learning-containers PR 3293 (DCGM, "
    "nccl-tests and the EFA checker installed 'for Sagemaker provided health check'). AWS publishes no list of "
    "the instance types it supports"
)
"""Where the infrastructure health check's rule (:func:`infra_check_supported`) comes from."""


def infra_check_supported(instance_type: str) -> bool:
    """Whether SageMaker's infrastructure health check (``CreateTrainingJob``'s ``InfraCheckConfig``) applies to
    ``instance_type``: a catalogue instance with NVIDIA GPUs and EFA (:attr:`InstanceSpec.efa_bandwidth_gb_s` > 0).

    AWS documents the check only as testing "the health of instance hardware and cluster network connectivity" and
    publishes no list of instance types; the checks it runs are NVIDIA DCGM diagnostics, nccl-tests and the EFA
    checker (:data:`INFRA_CHECK_SOURCES`), which need NVIDIA GPUs (every GPU of :data:`GPUS` is NVIDIA's) and, for
    the network, EFA. Every instance type of the catalogue has EFA, so the check applies to each; a type the
    catalogue does not know is answered ``False`` (it is refused as unknown where it matters)."""
    spec = INSTANCES.get(instance_type.strip().lower())
    return spec is not None and spec.efa_bandwidth_gb_s > 0


def default_infra_check(instance_type: str, instance_count: int) -> bool:
    """Whether a job that does not say turns SageMaker's infrastructure health check on: ``instance_count`` >= 2
    on an instance type it applies to (:func:`infra_check_supported`). Several instances are where a sick node or a
    broken network path costs the whole job, and where the check's NCCL and EFA tests between instances mean
    something; on one instance the trainer's own pre-flight (``training.preflight``) and SageMaker's repair of a
    GPU failure ("Cluster repairs for GPU errors", https://docs.aws.amazon.com/sagemaker/latest/dg/
    model-checkpoints-cluster-repair.html) are left to do it."""
    return instance_count >= 2 and infra_check_supported(instance_type)


def get_gpu(gpu: str | GPUSpec) -> GPUSpec:
    """``GPUS[gpu]`` (case-insensitive), or ``gpu`` itself when already a spec.

    Raises:
        KeyError: naming the known GPUs.
    """
    if isinstance(gpu, GPUSpec):
        return gpu
    spec = GPUS.get(gpu.strip().upper())
    if spec is None:
        raise KeyError(f"unknown GPU {gpu!r}; expected one of {', '.join(GPUS)}")
    return spec


def supports_precision(gpu: str | GPUSpec, precision: str) -> bool:
    """Whether ``gpu`` runs ``precision``: the registry's one hardware rule
    (:meth:`platform_spec.precisions.Precision.supported_by`) at the GPU's compute capability.

    Raises:
        platform_spec.precisions.UnknownPrecisionError: (a :class:`FieldError`) not a known precision.
        KeyError: unknown GPU name.
    """
    record = get_precision(precision)
    return record.supported_by(get_gpu(gpu).compute_capability)


def supported_precisions(gpu: str | GPUSpec) -> tuple[str, ...]:
    """The precisions ``gpu`` runs, in registry order."""
    cc = get_gpu(gpu).compute_capability
    return tuple(p for p in PRECISION_NAMES if get_precision(p).supported_by(cc))


def dense_peak_tflops(gpu_name: str | GPUSpec, precision: str) -> float:
    """Dense tensor-core peak TFLOP/s of one GPU at ``precision`` (the MFU denominator): the
    GPU figure the registry names (:attr:`platform_spec.precisions.Precision.dense_peak`: fp32 -> TF32
    dense; bf16/fp16 -> bf16 dense; fp8 and mxfp8 -> fp8 dense; nvfp4 -> fp4 dense).

    Raises:
        UnsupportedPrecisionError: (a ``FieldError``) the GPU cannot run ``precision``
            (e.g. mxfp8 on H100), naming the GPU and its supported precisions.
        platform_spec.precisions.UnknownPrecisionError: unknown precision.
        KeyError: unknown GPU name.
    """
    spec = get_gpu(gpu_name)
    record = get_precision(precision)
    value = getattr(spec, record.dense_peak) if record.supported_by(spec.compute_capability) else None
    if value is None:  # not supported, or a catalogue GPU without that figure
        raise UnsupportedPrecisionError(precision, spec.name, supported_precisions(spec))
    return float(value)


def gpu_for_device_name(device_name: str) -> GPUSpec | None:
    """Map a ``torch.cuda.get_device_name()`` string to a catalogue GPU.

    ``"NVIDIA H100 80GB HBM3"`` -> H100, ``"NVIDIA H200"`` -> H200,
    ``"NVIDIA B200"`` -> B200, ``"NVIDIA GB200"`` -> GB200. PCIe/NVL
    variants of H100/H200 (lower clocks and peaks) and unknown GPUs -> ``None``
    (the trainer then reports no MFU rather than a wrong one).

    Every GPU of :data:`GPUS` is tried (a GPU added there is found with no other change); each one's
    ``device_names`` must match its own names only (``(?<![A-Z])B200`` keeps ``GB200`` out of B200's), so a
    name that more than one GPU claims is ambiguous and answered ``None`` too.
    """
    text = device_name.strip()
    matches = [
        spec for spec in GPUS.values() if any(re.search(p, text, flags=re.IGNORECASE) for p in spec.device_names)
    ]
    return matches[0] if len(matches) == 1 else None


__all__ = [
    "DEFAULT_IMAGE_ARCHITECTURES",
    "DEFAULT_INSTANCE_TYPE",
    "GPUS",
    "IMAGE_ARCHITECTURES_RULE",
    "INFRA_CHECK_SOURCES",
    "INSTANCES",
    "INSTANCE_TYPES",
    "TRAINABLE_INSTANCE_TYPES",
    "TRAINER_IMAGE_ARCHITECTURES",
    "GPUSpec",
    "InstanceSpec",
    "UnknownInstanceTypeError",
    "UnsupportedHostArchitectureError",
    "UnsupportedPrecisionError",
    "default_infra_check",
    "dense_peak_tflops",
    "deployable_instance_types",
    "get_gpu",
    "get_instance",
    "get_trainable_instance",
    "gpu_for_device_name",
    "host_architecture_problem",
    "image_architectures_problem",
    "infra_check_supported",
    "supported_precisions",
    "supports_precision",
]


# ---------------------------------------------------------------------------
# Collective bandwidth: the planner's model of FSDP's links, which the trainer's pre-flight reports its measurement
# beside (training.preflight)

NVLINK_EFFICIENCY = 0.75
"""Achieved fraction of unidirectional NVLink bandwidth for NCCL all-gather/reduce-scatter (estimate)."""
EFA_EFFICIENCY = 0.7
"""Achieved fraction of per-GPU EFA bandwidth across instances (estimate)."""
NVLINK_LATENCY_S = 20e-6
EFA_LATENCY_S = 60e-6


@dataclass(frozen=True)
class CollectiveBandwidth:
    """The bandwidth a collective's per-GPU volume moves at (``bytes * (n - 1) / n`` for an all-gather or a
    reduce-scatter over ``n`` GPUs): the quantity nccl-tests reports as bus bandwidth ("Performance reported by
    NCCL tests", https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md), per GPU.

    Attributes:
        bytes_per_s: bytes/s per GPU (``inf`` for a group of one: nothing moves).
        latency_s: seconds each collective pays on top.
        link: ``"NVLink"``, ``"EFA v<n>"`` or ``"none"``.
    """

    bytes_per_s: float
    latency_s: float
    link: str


def nvlink_domain_hosts(instance: InstanceSpec) -> int:
    """How many hosts (machines, SageMaker training-job instances: :attr:`InstanceSpec.host`) one NVLink domain of
    ``instance`` holds: 1 where the domain is the host's own GPUs (P5, P6), 18 for ``ml.p6e-gb200.36xlarge`` (its 4
    GPUs in an UltraServer's domain of up to 72: :attr:`InstanceSpec.nvlink_domain_gpus`), 18 for
    ``ml.u-p6e-gb200x72`` and 9 for ``ml.u-p6e-gb200x36``. A job's hosts are assumed placed domain by domain, as a
    training plan's UltraServer capacity places them (SageMaker's ``ResourceConfig.InstancePlacementConfig``,
    "Configuration for how training job instances are placed and allocated within UltraServers")."""
    return max(1, instance.nvlink_domain_gpus // instance.gpus_per_host)


def collective_bandwidth(instance: InstanceSpec, group: int, *, per_host: int | None = None) -> CollectiveBandwidth:
    """The assumed bandwidth of a collective over ``group`` GPUs laid out host by host, ``per_host`` of them on each
    host (default: every GPU of a host, as FSDP's shard group). ``instance`` may be an UltraServer: the collective
    runs on its hosts (:attr:`InstanceSpec.host`), so N UltraServers of H hosts and N x H hosts plan the same.

    Within one NVLink domain -- the group's hosts all in one domain (:func:`nvlink_domain_hosts`): one host of a P5
    or P6 type, up to 18 ``ml.p6e-gb200.36xlarge`` hosts of a GB200 UltraServer, whose GPUs reach each other over
    NVLink switches across hosts -- half the catalogue's bidirectional NVLink figure at :data:`NVLINK_EFFICIENCY`.
    Only a group that spans NVLink domains uses EFA: NCCL runs one ring channel per NIC, so the bytes a GPU receives
    cross the host's network once per host, spread over all its NICs: a group holding every GPU of each host moves
    its per-GPU volume at the host's whole EFA bandwidth (at :data:`EFA_EFFICIENCY`), while groups of one GPU per
    host (HSDP's replica all-reduce: ``gpus_per_host`` such groups run at once) share it, ``1 / gpus_per_host``
    each. Between GB200 domains the same per-host rule applies (each ring leaves a domain through one host's NICs);
    NCCL may spread rings over more of a domain's NICs, which is not measured here, so this is the conservative
    figure (an UltraServer's EFA figure, the sum over its hosts, is not what one ring gets).
    """
    if group <= 1:
        return CollectiveBandwidth(float("inf"), 0.0, "none")
    host = instance.host
    members = min(per_host or host.gpus_per_instance, host.gpus_per_instance)  # the group's, per host
    hosts = -(-group // members)
    if hosts <= nvlink_domain_hosts(instance) and host.nvlink_bandwidth_gb_s > 0:
        return CollectiveBandwidth(host.nvlink_bandwidth_gb_s / 2 * 1e9 * NVLINK_EFFICIENCY, NVLINK_LATENCY_S, "NVLink")
    sharing = host.gpus_per_instance // members
    per_gpu = host.efa_bandwidth_gb_s / sharing * 1e9 * EFA_EFFICIENCY
    return CollectiveBandwidth(per_gpu, EFA_LATENCY_S, f"EFA v{host.efa_version}")
