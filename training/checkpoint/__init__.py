"""Checkpoints with torch.distributed.checkpoint (DCP), one module per role (as torchtitan splits its checkpointer).

- :mod:`training.checkpoint.verify`: is a folder a complete, loadable checkpoint (name, ``.complete`` marker,
  ``trainer_state.json``, DCP's ``.metadata`` and shards, RNG files), and what a restart resumes;
- :mod:`training.checkpoint.compare`: may this run resume it (the run record: model, backend, global batch,
  data stream, other hyperparameters);
- :mod:`training.checkpoint.manager`: :class:`~training.checkpoint.manager.CheckpointManager` saves, resumes
  and prunes ``step-N`` folders in an S3-synced checkpoint directory; the final model export.
"""
