import sys; sys.path.insert(0, "tests")
from test_host_syncs import *
from specviz.engine.treestep import TreeShape
import collections, inspect
from specviz.run import decoder_for_ids
print(inspect.signature(decoder_for_ids))
target = tiny_llama(V, layers=2)
for name, prop in (("ngram", NgramDraft()), ("model", ModelDraft(perturbed_copy(target, 0.3)))):
    dec = decoder_for_ids(target, prop, ragged_prompts(4, V, seed=5), 3, 24, tree=TreeShape(2, 6))
    steps = reads_per_step(dec)
    steady = [(rec, calls) for rec, calls in steps if not rec["left"] and not rec["joined"] and not rec["compacted"]]
    print(name, len(steady), "steady steps; reads per step:", [len(c) for _, c in steady])
    print(collections.Counter((c[1], c[2], c[0]) for _, cs in steady[1:2] for c in cs))
