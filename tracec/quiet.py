"""Third-party warnings and progress bars kept out of tracec's own output, unless a user asks for them.

transformers, torch and peft warn about deprecations on every load (`FutureWarning`s), transformers logs generation
flags it ignores, and its weight loading and shard writing draw progress bars into a verb's own. A verb prints what
it is doing itself, so they are off unless `tracec --library-output ...`: environment variables the libraries read when
they load (inherited by worker processes), a warnings filter for their modules, and, for a transformers already loaded,
its own switches.
"""

from __future__ import annotations

import os
import sys
import warnings

LIBRARIES = ("transformers", "torch", "peft", "accelerate", "huggingface_hub", "trl", "textworld", "tokenizers")


def quiet_libraries() -> None:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' bars follow huggingface_hub's switch
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    for library in LIBRARIES:
        warnings.filterwarnings("ignore", module=library)
    transformers = sys.modules.get("transformers")
    if transformers is not None:
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
