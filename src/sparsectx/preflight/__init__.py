"""The preflight: a model's checkpoint folder and a suite's benchmark files checked in seconds, before any job.

``python src/preflight.py model=<m> bench=<suite>`` (``src/preflight.py``, ``conf/preflight.yaml``; ``run``) runs
``check_checkpoint`` on the model and ``check_benchmark`` on every benchmark of the suite (and
``check_train_file`` on each training file it is given), with no GPU and no weights loaded:

- checkpoint: ``config.json`` there and its ``model_type``/``architectures`` served by a family
  (``sparsectx.models.families``), the processor files and the chat template found
  (``sparsectx.models.templates``), one image marker per image, ``model.thinking`` honoured, the thinking
  prefix the generation prompt opens (``model.answer_prefix`` never inside an open block), the eos ids
  (tokenizer and ``generation_config.json``), and the visual-token count of a sample image at
  ``model.max_visual_tokens`` (the checkpoint's own processor);
- benchmark: its file(s) found (``protocol.bench_files``), the columns its layout reads present, every row
  usable (``tsv.read_rows``: index unique, image decodes, ...; ``layout.apply_layout``: options and a gold
  answer the scorer can read), options on every row of a multiple-choice scorer, each video row's clip there
  (``video.clip_problem``). Rows VLMEvalKit drops (``layout.drop_rows``) are counted, never problems.

Every problem is one ``Problem``: the file, the row (its ``index``), the column, what is wrong and the fix.
``needs`` lists what a preset needs (``--list``): checkpoint, benchmark files, media folders, training files,
with where each goes and how to get it. Nothing here generates anything.

Modules: ``report`` (``Problem``, ``Checked``, the printed lines), ``checkpoint``, ``benchmark``, ``training``,
``needs`` (``--list``) and ``run`` (the config and the entry point's run).
"""

from sparsectx.preflight.benchmark import check_benchmark
from sparsectx.preflight.checkpoint import check_checkpoint
from sparsectx.preflight.report import Checked, Problem, report_lines
from sparsectx.preflight.run import load_preflight_config, run
from sparsectx.preflight.training import check_train_file

__all__ = [
    "Checked",
    "Problem",
    "check_benchmark",
    "check_checkpoint",
    "check_train_file",
    "load_preflight_config",
    "report_lines",
    "run",
]
