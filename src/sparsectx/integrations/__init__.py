"""Code that runs inside the harnesses' own environments (VLMEvalKit, lmms-eval), never in the project's.

Nothing in ``sparsectx`` imports these modules: each imports its harness (``vlmeval``, ``lmms_eval``) at the
top, and ``import vlmeval`` alone changes the process (it imports torchvision and turns off HTTPS
certificate checks). ``vlmeval_evaluate.py`` is a standalone script the project runs by path with the
VLMEvalKit environment's python (``sparsectx.eval.vlmeval_bridge``); ``vlmeval_model`` and
``lmms_eval_model`` are the model adapters a harness loads; ``vlmeval_register`` (standard library only) is the
import hook that makes ``vlmeval_model``'s class a model of VLMEvalKit's own ``run.py``, installed into its
environment by ``make vlmeval-env``. docs/harnesses.md says how to use each.
"""
