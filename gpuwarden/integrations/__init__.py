"""Training-framework callbacks over the task SDK: ``gpuwarden.integrations.lightning`` (PyTorch
Lightning) and ``gpuwarden.integrations.transformers`` (Hugging Face ``Trainer``).

Each module imports its framework and ``gpuwarden.sdk`` only, so a training job needs neither the
agent's dependencies nor the other framework; install with ``pip install 'gpuwarden[lightning]'``
or ``'gpuwarden[transformers]'``. What each callback measures, and what its framework's hooks
cannot show it: docs/agent.md, "Training frameworks".
"""
