"""Where the example components leave what they saw: JSON files in the directory the
topology config names under ``examples.out`` (nothing without it)."""
import json
import os

OUT_KEY = "examples.out"


def write_json(config, name, doc):
    out = config.get(OUT_KEY)
    if not out:
        return
    os.makedirs(out, exist_ok=True)
    tmp = os.path.join(out, f".{name}.tmp")
    with open(tmp, "w") as f:
        json.dump(doc, f, sort_keys=True)
    os.replace(tmp, os.path.join(out, name))
