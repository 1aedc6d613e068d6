"""The Python API: train, load, score, sample and compare from a notebook or a script.

Each call runs the code of the matching command, so it gives the command's numbers:

    import nplm

    run = nplm.train("corpus=toy", "trainer.max_epochs=2")   # nplm-train corpus=toy trainer.max_epochs=2
    model = nplm.load(run.path)                                # its best checkpoint
    model.perplexity("the cat sat on the mat .")               # nplm-eval CKPT --text <that text>
    model.generate("the", tokens=20, seed=1)                   # nplm-generate CKPT --prompt the --length 20 --seed 1
    model.predict("the cat", k=5)                              # nplm-predict CKPT "the cat" --top-k 5
    nplm.compare("outputs/default")                            # nplm-compare outputs/default

Importing this package loads neither torch nor Lightning: they load when a function needs them.
A mistake in an argument is a `nplm.errors.UserError` of one line naming the key, as the commands' are.
"""

from nplm.api.model import Model, load
from nplm.api.runs import Run, Table, compare, train

__all__ = ["Model", "Run", "Table", "compare", "load", "train"]
