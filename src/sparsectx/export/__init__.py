"""Publishing a finished training run's model: its ``adapter/`` or ``checkpoint/`` to the Hugging Face Hub or a
local folder, with a model card that names a base the Hub resolves and carries the model's known scores.

``config`` reads ``conf/export.yaml``; ``base`` checks the base model a published card names; ``evaluations`` finds
the scores ``evaluate.py`` measured on the checkpoint; ``publish`` checks everything, then writes or pushes
(``python src/export.py``).
"""
