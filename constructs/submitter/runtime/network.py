"""Where a job runs in the platform's VPC: its availability zones and its ``VpcConfig.Subnets``.

In VPC mode (:attr:`.config.SubmitterConfig.vpc_mode`) every job gets ``VpcConfig`` with the platform's
security groups and subnets chosen here:

* a job reading an FSx for Lustre channel runs in the file system's subnet only (a file system lives
  in one availability zone, and SageMaker reaches it through the job's network interfaces);
* a job on a training plan runs in the subnets of the zone the plan's block is in (the block's
  ``AvailabilityZone``, ``DescribeTrainingPlan``'s ``ReservedCapacitySummaries``): the reserved instances
  are there. :func:`.capacity.judge_plan` skips a plan whose block is in a zone the job may not use
  (:func:`job_zones`), naming both;
* any other job (spot, on-demand) gets every platform subnet, and SageMaker chooses.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import SubmitterConfig
from .request import SubmitRequest


def job_zones(request: SubmitRequest, config: SubmitterConfig) -> tuple[str, ...]:
    """The availability zones ``request``'s job may run in, sorted: the FSx file system's zone for a job reading
    it, else every zone with a platform subnet; ``()`` without VPC mode (any zone)."""
    if not config.vpc_mode:
        return ()
    if request.reads_fsx and config.fsx_lustre is not None:
        return (config.fsx_lustre.availability_zone,)
    return tuple(sorted({subnet.availability_zone for subnet in config.vpc_subnets}))


def job_subnets(request: SubmitRequest, config: SubmitterConfig, zone: str | None) -> list[str]:
    """``VpcConfig.Subnets`` of ``request``'s job: the FSx file system's subnet for a job reading it, else the
    platform's subnets in ``zone`` (the training plan block's; ``None``: every subnet), in configured order.

    Raises:
        ValueError: no platform subnet fits (``zone`` is not among :func:`job_zones`, which the capacity choice
            has checked: a bug), or the platform has no VPC mode.
    """
    if not config.vpc_mode:
        raise ValueError("job_subnets: the platform has no VPC mode (VPC_SUBNETS is not set)")
    fsx = config.fsx_lustre
    if request.reads_fsx and fsx is not None:
        chosen = [fsx.subnet_id] if zone in (None, fsx.availability_zone) else []
    else:
        chosen = [s.subnet_id for s in config.vpc_subnets if zone is None or s.availability_zone == zone]
    if not chosen:
        raise ValueError(
            f"job_subnets: no platform subnet in availability zone {zone!r} (zones: {job_zones(request, config)})"
        )
    return chosen


@dataclass(frozen=True)
class JobZones:
    """The availability zones a job may run in (:func:`allowed_zones`) and why, for a plan's refusal.

    Attributes:
        zones: sorted zone names.
        why: what binds the job to them, e.g. ``"the zone of FSx for Lustre file system fs-..."``.
    """

    zones: tuple[str, ...]
    why: str

    def refusal(self, zone: str | None) -> str:
        """Why a block in ``zone`` (``None``: the block reports none) cannot run the job, naming the zones."""
        where = f"is in availability zone {zone}" if zone else "reports no AvailabilityZone"
        return f"its block {where}; the job can run only in {', '.join(self.zones)} ({self.why})"


def allowed_zones(request: SubmitRequest, config: SubmitterConfig) -> JobZones | None:
    """:func:`job_zones` with the reason; ``None`` without VPC mode (a plan's block may be in any zone)."""
    zones = job_zones(request, config)
    if not zones:
        return None
    fsx = config.fsx_lustre
    if request.reads_fsx and fsx is not None:
        why = f"the zone of FSx for Lustre file system {fsx.file_system_id}, which an input channel reads"
    else:
        why = "the zones of the platform's subnets"
    return JobZones(zones, why)
