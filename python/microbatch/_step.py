"""What a step of :mod:`microbatch.torch` (the sampler's :class:`~microbatch.torch.Step`, the
stream's :class:`~microbatch.torch.StreamStep`) reads from its plan as seen from one rank."""

from typing import List

from .plan import Plan


class PlanView:
    """The members a training loop reads from one step's plan on one rank.

    Subclasses hold ``plan`` (the step's whole plan, every rank's micro-batches)
    and ``rank`` (the rank the record is for).
    """

    plan: Plan
    rank: int

    @property
    def micro_steps(self) -> int:
        """The micro-steps of this step (the same on every rank)."""
        return self.plan.micro_steps

    @property
    def fingerprint(self) -> int:
        """The plan's fingerprint (equal on every rank that planned the same step)."""
        return self.plan.fingerprint

    @property
    def samples(self) -> int:
        """The samples of the whole step (all ranks)."""
        return len(self.plan)

    def loss_scale(self, normalization: str, reduction: str) -> float:
        """The factor each micro-batch's summed loss is multiplied by: see :meth:`microbatch.Plan.loss_scale`."""
        return self.plan.loss_scale(normalization, reduction)

    def micro_batch(self, micro_step: int) -> List[int]:
        """The sample ids (the sampler's dataset indices) of this rank's micro-batch ``micro_step`` (possibly none)."""
        return self.plan.micro_batch(self.rank, micro_step).tolist()
