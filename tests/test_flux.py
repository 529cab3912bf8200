"""Storm Flux YAML topologies under ``bittern submit`` / ``bittern run`` (PyYAML parses
them: ``bittern[flux]``): Storm's word count written as flux-examples' multilang.yaml
(tests/topologies/flux/wordcount.yaml: FluxShellSpout and FluxShellBolt components,
storm.py scripts in resources/, an include, ``${...}`` from ``--filter`` and
``${ENV-...}`` with ``--env-filter``, LOCAL_OR_SHUFFLE, FIELDS and GLOBAL groupings)
counts exactly; a Flux file naming a Java bolt is refused in one line. The parser's
cases are in tests/unit/test_flux.py."""
from __future__ import annotations

import glob
import importlib.util
import os
import sys
from collections import Counter

from conftest import ROOT, wait_for

FLUX = os.path.join(ROOT, "tests", "topologies", "flux")
NAME = "flux-wordcount"


def sentences_module():
    spec = importlib.util.spec_from_file_location("flux_words", os.path.join(FLUX, "resources", "words.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def lines(pattern):
    """{file name: [lines]} of the files matching ``pattern``."""
    out = {}
    for path in glob.glob(pattern):
        with open(path) as f:
            out[os.path.basename(path)] = f.read().splitlines()
    return out


def counted(out):
    return sum(len([w for w in ws if not w.startswith("#")]) for ws in lines(os.path.join(out, "count-*.txt")).values())


def test_flux_word_count_with_shell_components_includes_and_substitution(bittern, home, tmp_path):
    words, n = sentences_module(), 300
    expected = Counter(w for i in range(n) for w in words.sentence(i).split(" "))
    out = str(tmp_path / "out")
    props = tmp_path / "wordcount.properties"
    props.write_text(f"# as Storm's flux --filter reads it\npython={sys.executable}\nout.dir = {out}\n"
                     "split.parallelism: 3\n")
    bittern.env["WC_SENTENCES"] = str(n)
    r = bittern("submit", os.path.join(FLUX, "wordcount.yaml"), "--filter", props, "--env-filter", check=True)
    assert f"topology {NAME} submitted: 8 tasks" in r.stdout  # 1 spout, 3 split, 2 count, 2 tally
    try:
        doc = bittern.state("topologies", NAME)
        wait_for(lambda: counted(out) >= sum(expected.values()), timeout=60, what="every word counted")
        wait_for(lambda: sum(len(v) for v in lines(os.path.join(out, "acked-*.txt")).values()) >= n, timeout=30,
                 what="every sentence acked")
    finally:
        bittern("kill", NAME, check=True)

    comps = {c["name"]: c for c in doc["definition"]["components"]}
    assert {c: comps[c]["par"] for c in comps} == {"sentence-spout": 1, "split": 3, "count": 2, "tally": 2}
    assert comps["split"]["inputs"] == [{"component": "sentence-spout", "stream": "default",
                                         "grouping": {"type": "local_or_shuffle"}}]
    assert comps["count"]["inputs"][0]["grouping"] == {"type": "fields", "fields": ["word"]}
    assert comps["tally"]["inputs"][0]["grouping"] == {"type": "global"}
    assert comps["sentence-spout"]["config"]["wordcount.sentences"] == n  # ${ENV-WC_SENTENCES}, a number
    assert comps["split"]["config"]["multilang.command"] == [sys.executable]  # ${python}
    assert comps["split"]["config"]["multilang.script"] == "splitsentence.py"  # found in resources/
    # the include: its keys the file lacks come in; its spout too; its count bolt and its
    # timeout do not replace the file's own (override: false)
    assert doc["config"]["topology.max.spout.pending"] == 50 and doc["config"]["topology.message.timeout.secs"] == 45
    assert doc["config"]["topology.reliability.mode"] == "ATLEAST_ONCE"  # Storm's default: ackers run

    counts = lines(os.path.join(out, "count-*.txt"))
    assert len(counts) == 2 and all(ws[0] == "# from wordcount.yaml" for ws in counts.values())
    per_task = [Counter(ws[1:]) for ws in counts.values()]
    assert sum(per_task, Counter()) == expected  # exact: every word of every sentence once
    assert not set(per_task[0]) & set(per_task[1])  # FIELDS: a word is counted by one task
    acked = [int(i) for ids in lines(os.path.join(out, "acked-*.txt")).values() for i in ids]
    assert sorted(acked) == list(range(n))  # every tuple tree completed once
    tally = {f: ws for f, ws in lines(os.path.join(out, "tally-*.txt")).items()}
    lowest = min(tally, key=lambda f: int(f.split("-")[1].split(".")[0]))
    assert len(tally[lowest]) == sum(expected.values())  # GLOBAL: all on the lowest task
    assert all(not ws for f, ws in tally.items() if f != lowest)
    final = {}
    for line in tally[lowest]:
        word, count = line.split(" ")
        final[word] = max(final.get(word, 0), int(count))
    assert final == dict(expected)


def test_a_flux_file_naming_a_java_bolt_is_refused_in_one_line(bittern, home):
    r = bittern("run", os.path.join(FLUX, "java_bolt.yaml"), "--duration", 1, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "error: java_bolt.yaml: bolt 'count': className org.apache.storm.testing.TestWordCounter is a Java bolt; "
        "Bittern runs Flux's shell components only (org.apache.storm.flux.wrappers.bolts.FluxShellBolt)"]
    assert not glob.glob(os.path.join(home, "state", "topologies", "*"))  # nothing recorded, nothing started
