"""sparsectx: vision-language models under extreme visual-token budgets (prune, post-train, evaluate)."""

import logging

# torchao (8-bit optimizer states) is imported by transformers and peft whenever it is installed. Its wheel
# ships quantisation kernels built for one torch release; on another it logs a warning per kernel it cannot
# load, and torch logs one per Enum it registers, at every model load. The project uses only its optimizer,
# which needs neither, so those two loggers report errors only.
for _name in ("torchao", "torch.utils._pytree"):
    logging.getLogger(_name).setLevel(logging.ERROR)
