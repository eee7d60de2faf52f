"""The reliability matrix: bad inputs and faults a hostile but honest user would try,
each run against the built `drmas` binary, judged as a clean, actionable error (or the
right behaviour) or not. Prints one line per case and the count.

    python3 scripts/py/reliability_matrix.py [--drmas target/debug/drmas]

Needs the test fixtures (scripts/make-fixtures.sh): the tiny chat model, the tiny GGUF
and the test plugins. A case fails if drmas panics, is killed by the kernel, exits 0
where it should refuse, or refuses without the expected words.
"""

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "target/tiny-models/tiny-chat"
TINY_GGUF = ROOT / "target/gguf-fixtures/tiny.gguf"
PLUGINS = ROOT / "target/test-plugins"

results = []

# Seconds a case waits for what should take a few before it calls it a hang: a guard,
# never the thing judged, and generous because the test command runs on loaded machines.
HANG = 300


def mk(path):
    path.mkdir(parents=True, exist_ok=True)
    return path


def run(args, env=None, cwd=None, timeout=300):
    e = dict(os.environ)
    e.pop("DRMAS_PLUGIN_PATH", None)
    e.pop("DRMAS_FAULT_POINT", None)
    e.update(env or {})
    p = subprocess.run(
        [str(DRMAS)] + [str(a) for a in args],
        env=e,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p


def clean(p):
    """A refusal that is an error line, not a crash."""
    return (
        p.returncode not in (0, -signal.SIGKILL, -signal.SIGABRT, -signal.SIGSEGV, 101)
        and "panicked" not in p.stderr
        and "\x1b[" not in p.stderr
    )


def case(group, name, ok, detail=""):
    results.append((group, name, ok, detail))
    mark = "ok  " if ok else "FAIL"
    print(f"{mark} [{group}] {name}" + (f": {detail}" if detail and not ok else ""))
    sys.stdout.flush()


def refuses(group, name, args, words, **kw):
    p = run(args, **kw)
    ok = clean(p) and all(w in p.stderr for w in words)
    case(group, name, ok, f"exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return p


TASKS = "".join(
    json.dumps({"id": f"t{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
    for i in range(3)
)


def experiment(d, extra_top="", agents=None, data=True, output_dir=True, name="matrix", model=TINY,
               workflow="entry = \"solver\"", trainer="", sampling="max_new_tokens = 6"):
    d = Path(d)
    (d / "tasks.jsonl").write_text(TASKS)
    out = f'output_dir = "{d / "run"}"\n' if output_dir else ""
    agents = agents or f"""
[[agents]]
name = "solver"
component = "math/solver"
model = "lm"
sampling = {{ {sampling} }}
[agents.config]
verifier = ""
"""
    data_text = f'[data]\ntrain = {{ path = "{d / "tasks.jsonl"}" }}\nval = [{{ path = "{d / "tasks.jsonl"}" }}]\n' if data else ""
    text = f"""[experiment]
name = "{name}"
{out}{extra_top}
[[models]]
id = "lm"
path = "{model}"
{agents}
[workflow]
{workflow}
[[rewards]]
component = "math/boxed"
[normalizer]
component = "norms/grpo"
{data_text}
[trainer]
steps = 1
prompts_per_step = 1
group_size = 2
{trainer}
[pool]
devices = ["cpu"]
"""
    path = d / "exp.toml"
    path.write_text(text)
    return path


def g1_outputs(tmp):
    g = "outputs"
    d = tmp / "g1"
    d.mkdir()
    exp = experiment(d)
    report, samples = d / "out/report.json", d / "out/samples.jsonl"
    p = run(["eval", exp, "--k", "2", "--out", report, "--dump-samples", samples])
    case(g, "eval writes report and samples", p.returncode == 0, p.stderr[-300:])

    def whole(path):
        """The file as this run wrote it whole, or the earlier run's, set aside as
        NAME.stale before the run started (it is never left where this run's goes)."""
        here = path if path.exists() else path.with_name(path.name + ".stale")
        return here.read_text()

    def intact():
        try:
            r = json.loads(whole(report))
            lines = whole(samples).splitlines()
            return "episodes" in r or r == {"old": True}, all(json.loads(l) is not None for l in lines)
        except Exception as e:  # noqa: BLE001
            return False, str(e)

    for point in ["file-partial#1", "file-written#1", "file-renamed#1", "file-partial#2", "file-written#2", "file-renamed#2"]:
        for stale in (report.with_name(report.name + ".stale"), samples.with_name(samples.name + ".stale")):
            stale.unlink(missing_ok=True)
        report.write_text('{"old": true}')
        samples.write_text('{"old": true}\n')
        p = run(["eval", exp, "--k", "2", "--out", report, "--dump-samples", samples], env={"DRMAS_FAULT_POINT": point})
        a, b = intact()
        case(g, f"kill at {point} of the sample dump / report leaves old or new", p.returncode == -9 and a and b is True, f"{p.returncode} {a} {b}")

    # Import: kill at each step leaves the old or the new model.
    models = d / "models"
    models.mkdir()
    target = models / "m"
    p = run(["model", "import", TINY_GGUF, target])
    case(g, "model import writes a model folder", p.returncode == 0 and (target / ".drmas-model").is_file(), p.stderr[-300:])
    for point in ["file-partial", "dir-staged", "dir-swapped"]:
        p = run(["model", "import", TINY_GGUF, target, "--force"], env={"DRMAS_FAULT_POINT": point})
        whole = (target / "config.json").is_file() and (target / "model.safetensors").is_file()
        case(g, f"import killed at {point} leaves a whole model", p.returncode == -9 and whole)
    foreign = d / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    refuses(g, "import --force over a folder drmas did not write", ["model", "import", TINY_GGUF, foreign, "--force"], ["not a model folder drmas wrote"])
    case(g, "  ... and the folder is untouched", (foreign / "keep.txt").is_file())
    refuses(g, "import --force over the current folder", ["model", "import", TINY_GGUF, ".", "--force"], ["is the current folder"], cwd=foreign)

    # One writer per run folder and per report.
    exp2 = experiment(mk(d / "t"), trainer="save_every = 1")
    child = subprocess.Popen([str(DRMAS), "train", exp2, "--quiet", "--steps", "200"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not (d / "t/run/.lock").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    p = run(["train", exp2, "--resume", "--quiet"])
    case(g, "a second run on the same folder is refused with the pid", clean(p) and f"pid {child.pid}" in p.stderr, p.stderr[-300:])
    child.kill()
    child.wait()
    p = run(["train", exp2, "--resume", "--quiet", "--steps", "1"])
    case(g, "a killed run's lock is not stuck (resume runs)", "in use" not in p.stderr and clean(p) or p.returncode == 0, p.stderr[-300:])

    refuses(g, "--out and --dump-samples the same file", ["eval", exp, "--out", d / "x.json", "--dump-samples", d / "x.json"], ["same file"])
    refuses(g, "--limit 0", ["eval", exp, "--limit", "0"], ["--limit"])
    bad = experiment(mk(d / "l"))
    bad.write_text(bad.read_text().replace('val = [{ path = "' + str(d / "l/tasks.jsonl") + '" }]', 'val = [{ path = "' + str(d / "l/tasks.jsonl") + '", limit = 0 }]'))
    refuses(g, "limit = 0 in the experiment", ["check", bad], ["limit: must be at least 1"])
    afile = d / "afile"
    afile.write_text("")
    refuses(g, "--out under a file, before any work", ["eval", exp, "--out", afile / "r.json"], ["is a file, not a folder"])
    refuses(g, "--out that is a folder", ["eval", exp, "--out", d], ["is a folder"])
    p = run(["eval", exp, "--k", "1", "--dump-samples", d / "new/deeper/s.jsonl"])
    case(g, "--dump-samples creates its folder", p.returncode == 0 and (d / "new/deeper/s.jsonl").is_file(), p.stderr[-300:])
    n = d / "n"
    n.mkdir()
    refuses(g, "experiment name ../../x", ["check", experiment(n, name="../../x", output_dir=False)], ["not a plain folder name"])
    run(["eval", exp, "--k", "1", "--out", report, "--dump-samples", samples], env={"DRMAS_FAULT_POINT": "file-partial"})
    leftovers = [x.name for x in (d / "out").iterdir() if ".tmp-" in x.name or ".old-" in x.name]
    p = run(["eval", exp, "--k", "1", "--out", report, "--dump-samples", samples])
    after = [x.name for x in (d / "out").iterdir() if ".tmp-" in x.name or ".old-" in x.name]
    case(g, "a killed writer's leftovers are cleaned by the next run", p.returncode == 0 and leftovers and not after, f"{leftovers} -> {after}")


def g2_sizes(tmp):
    g = "sizes"
    d = tmp / "g2"
    d.mkdir()

    def edited(key, value):
        m = d / f"m-{key}"
        shutil.copytree(TINY, m)
        c = json.loads((m / "config.json").read_text())
        c[key] = value
        (m / "config.json").write_text(json.dumps(c))
        return m

    for key in ["num_hidden_layers", "vocab_size", "hidden_size", "intermediate_size"]:
        m = edited(key, 100000)
        t = time.time()
        refuses(g, f"{key}: 100000 against the weights (generate)", ["generate", "--model", m, "--prompt", "hi", "--device", "cpu"], [key])
        refuses(g, f"{key}: 100000 against the weights (check)", ["check", experiment(mk(d / key), model=m)], [key])
    p = run(["check", experiment(mk(d / "ctx"), sampling="max_new_tokens = 5000", trainer="micro_batch_tokens = 100000")])
    case(g, "max_new_tokens past the context, at check", clean(p) and "context" in p.stderr, p.stderr[-300:])
    refuses(g, "prompt + max_new_tokens past the context (generate)", ["generate", "--model", TINY, "--prompt", "hi", "--max-new-tokens", "4294967295", "--device", "cpu"], ["context"])
    refuses(g, "--k 100000000 (eval)", ["eval", experiment(mk(d / "k")), "--k", "100000000"], ["GiB"])
    refuses(g, "--n 100000 (generate, batch memory)", ["generate", "--model", TINY, "--prompt", "hi", "--n", "100000", "--max-new-tokens", "2048", "--device", "cpu"], ["GiB"])


def g3_nonfinite(tmp):
    g = "non-finite"
    d = tmp / "g3"
    d.mkdir()
    m = d / "nan"
    shutil.copytree(TINY, m)
    code = (
        "import sys, torch; from safetensors.torch import load_file, save_file;"
        "p=sys.argv[1]; t=load_file(p); k=sorted(t)[-1]; t[k]=t[k].clone(); t[k].view(-1)[0]=float('nan'); save_file(t,p,metadata={'format':'pt'})"
    )
    subprocess.run([str(ROOT / ".venv/bin/python"), "-c", code, str(m / "model.safetensors")], check=True)
    refuses(g, "a NaN weight is refused at load, naming the tensor", ["generate", "--model", m, "--prompt", "hi", "--device", "cpu"], ["NaN", "tensor"])


def g4_devices(tmp):
    g = "devices/values"
    d = tmp / "g4"
    d.mkdir()
    exp = experiment(d)
    refuses(g, "--device cuda:7 (generate)", ["generate", "--model", TINY, "--prompt", "hi", "--device", "cuda:7"], ["cuda:7", "devices"])
    bad = experiment(mk(d / "p"))
    bad.write_text(bad.read_text().replace('devices = ["cpu"]', 'devices = ["cuda:7"]'))
    refuses(g, "[pool] devices = cuda:7", ["check", bad], ["cuda:7", "does not exist"])
    for opt, val in [("--temperature", "nan"), ("--temperature", "-1"), ("--top-p", "2"), ("--top-p", "0")]:
        refuses(g, f"eval {opt} {val}", ["eval", exp, opt, val], [opt])
    refuses(g, "generate --top-k -1", ["generate", "--model", TINY, "--prompt", "hi", "--top-k", "-1"], ["--top-k"])


def g5_check(tmp):
    g = "check"
    d = tmp / "g5"
    d.mkdir()

    def sub(n):
        p = d / n
        p.mkdir()
        return p

    refuses(g, "missing model path", ["check", experiment(sub("a"), model=d / "nope")], ["does not exist"])
    empty = d / "empty-model"
    empty.mkdir()
    refuses(g, "model path without config.json", ["check", experiment(sub("b"), model=empty)], ["no config.json"])
    x = sub("c")
    e = experiment(x)
    e.write_text(e.read_text().replace(f'train = {{ path = "{x / "tasks.jsonl"}" }}', f'train = {{ path = "{x / "missing.jsonl"}" }}'))
    refuses(g, "missing data file", ["check", e], ["does not exist"])
    x = sub("c2")
    e = experiment(x)
    e.write_text(e.read_text().replace(f'train = {{ path = "{x / "tasks.jsonl"}" }}', f'train = {{ path = "{x}" }}'))
    refuses(g, "a data path that is a folder", ["check", e], ["is a folder"])
    x = sub("e")
    e = experiment(x, data=False)
    refuses(g, "empty val, for eval (check --for eval)", ["check", e, "--for", "eval"], ["val"])
    refuses(g, "empty val (eval)", ["eval", e], ["no [data] val"])
    x = sub("f")
    (x / "afile").write_text("")
    e = experiment(x, output_dir=False, extra_top=f'output_dir = "{x / "afile"}"\n')
    refuses(g, "output_dir that is a file", ["check", e], ["is a file"])
    agents = """
[[agents]]
name = "solver"
component = "math/solver"
model = "lm"
sampling = { max_new_tokens = 6 }
[agents.config]
verifier = "verfier"
"""
    refuses(g, "a hand-off to an agent that does not exist", ["check", experiment(sub("h"), agents=agents)], ["names agent `verfier`"])
    refuses(g, "max_turns = 100000", ["check", experiment(sub("t"), workflow='entry = "solver"\nmax_turns = 100000')], ["max_turns"])


def g6_plugins(tmp):
    g = "plugins"
    d = tmp / "g6"
    d.mkdir()
    refuses(g, "missing --plugin-dir", ["plugins", "list", "--plugin-dir", d / "nope"], ["does not exist"])
    refuses(g, "missing DRMAS_PLUGIN_PATH folder", ["plugins", "list"], ["does not exist", "DRMAS_PLUGIN_PATH"], env={"DRMAS_PLUGIN_PATH": str(d / "nope")})
    ww = d / "ww"
    ww.mkdir()
    shutil.copy(PLUGINS / "good.so", ww / "good.so")
    os.chmod(ww, 0o777)
    p = run(["plugins", "list", "--plugin-dir", ww])
    case(g, "a world-writable folder is refused before loading", "writable by every user" in p.stdout + p.stderr and "good/echo" not in p.stdout, (p.stdout + p.stderr)[-300:])
    p = run(["plugins", "list", "--plugin-dir", ww, "--allow-untrusted-plugins"])
    case(g, "  ... and loads with the opt-in", "good/echo" in p.stdout, (p.stdout + p.stderr)[-300:])
    os.chmod(ww, 0o755)
    os.chmod(ww / "good.so", 0o777)
    p = run(["plugins", "list", "--plugin-dir", ww])
    case(g, "a world-writable .so is refused", "writable by every user" in p.stdout + p.stderr and "good/echo" not in p.stdout, (p.stdout + p.stderr)[-300:])
    os.chmod(ww / "good.so", 0o755)
    x = d / "pin"
    x.mkdir()
    e = experiment(x, extra_top="")
    text = e.read_text().replace("[[models]]", f'[plugins]\ndirs = ["{ww}"]\nsha256 = {{ "good.so" = "{"0" * 64}" }}\n\n[[models]]', 1)
    e.write_text(text)
    p = run(["check", e])
    case(g, "a sha256 pin mismatch is refused before loading", "refusing to load it" in p.stderr and "sha256" in p.stderr, p.stderr[-300:])
    case(g, "each skipped file is reported once, without colour codes", p.stderr.count("good.so: sha256") <= 1 and "\x1b[" not in p.stderr, p.stderr[-300:])


def g8_run_folder(tmp):
    """The run folder and resume: pruning killed halfway, stops that keep their steps,
    edits refused on resume, checkpoint parts that disagree, and the folder's messages."""
    g = "run folder"
    d = tmp / "g8"
    d.mkdir()

    def ckpts(x):
        c = x / "run/checkpoints"
        return sorted(p.name for p in c.iterdir()) if c.is_dir() else []

    def logged(x):
        m = x / "run/metrics.jsonl"
        return [json.loads(l)["step"] for l in m.read_text().splitlines()] if m.is_file() else []

    def train(exp, *extra, **kw):
        return run(["train", exp, "--quiet", *extra], **kw)

    # 3. An old checkpoint retired by a rename first: a kill while deleting it leaves
    # complete step-* folders and a leftover the next writer removes.
    for point in ["prune-partial", "prune-renamed"]:
        x = mk(d / point)
        exp = experiment(x, trainer="save_every = 1\nkeep_checkpoints = 1")
        p = train(exp, "--steps", "2", env={"DRMAS_FAULT_POINT": point})
        names = ckpts(x)
        case(g, f"a kill at {point} leaves only complete step-* folders and a known leftover",
             p.returncode == -9 and names == [".step-000001.retired", "step-000002"], f"{p.returncode} {names}")
        p = run(["eval", exp, "--checkpoint", x / "run/checkpoints/step-000002", "--k", "1", "--out", x / "e.json"])
        case(g, "  ... eval --checkpoint loads the step-* folder", p.returncode == 0, p.stderr[-300:])
        p = train(exp, "--resume", "--steps", "3")
        case(g, "  ... and the resume removes the leftover", p.returncode == 0 and ckpts(x) == ["step-000003"],
             f"{p.returncode} {ckpts(x)} {p.stderr[-300:]}")

    # 4. The failed-episode limit checkpoints the steps done (a reward plugin that
    # panics on tasks t3, t6, ...: here t9 only, in whichever step draws it).
    x = mk(d / "budget")
    exp = experiment(x, trainer="save_every = 0")
    rows = [{"id": f"t{i}", "question": f"What is {i} + 1?", "answer": str(i + 1)} for i in [1, 2, 4, 5, 7, 8, 9]]
    (x / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    plugins = mk(x / "plugins")
    shutil.copy(PLUGINS / "misbehave.so", plugins / "misbehave.so")
    # Two tasks a step: the step with t9 has half its episodes failed.
    text = exp.read_text().replace('component = "math/boxed"', 'component = "misbehave/flaky"').replace("prompts_per_step = 1", "prompts_per_step = 2")
    exp.write_text(text.replace("[[models]]", f'[plugins]\ndirs = ["{plugins}"]\n\n[[models]]', 1))
    p = train(exp, "--steps", "7")
    done = logged(x)
    kept = ckpts(x)
    # (Not `clean`: the plugin's own panic message is quoted in the refusal.)
    case(g, "the failure limit stops with a checkpoint of the steps done, and says so",
         p.returncode not in (0, -9, -6, -11, 101) and "training stopped" in p.stderr and "kept in" in p.stderr and "continue with --resume" in p.stderr
         and done and kept == [f"step-{len(done):06}"], f"{done} {kept} {p.stderr[-400:]}")
    # Own: a resume after raising the limit is no change (a stop limit may change).
    exp.write_text(exp.read_text().replace('entry = "solver"', 'entry = "solver"\nmax_failed_episodes = 0.6'))
    p = train(exp, "--resume", "--steps", str(len(done) + 1))
    case(g, "  ... and a resume with a raised failure limit goes on (a stop limit may change)",
         p.returncode == 0 and logged(x) == list(range(1, len(done) + 2)), p.stderr[-300:])

    # 8. Edits are listed on resume, key: old → new, and refused without --accept-changes.
    x = mk(d / "edits")
    exp = experiment(x, trainer="save_every = 1")
    p = train(exp)
    case(g, "a one-step run to resume", p.returncode == 0, p.stderr[-300:])
    original = exp.read_text()
    tasks = (x / "tasks.jsonl").read_text()
    other = x / "other-model"
    shutil.copytree(TINY, other)
    w = other / "model.safetensors"
    b = bytearray(w.read_bytes())
    b[8 + int.from_bytes(b[:8], "little")] ^= 1  # the lowest bits of the first weight
    w.write_bytes(bytes(b))
    edits = [
        ("lr", 'id = "lm"', 'id = "lm"\nlr = 2e-6', "models[lm].lr: 0.000001 → 0.000002"),
        ("normalizer", 'component = "norms/grpo"', 'component = "norms/drmas"', 'normalizer.component: "norms/grpo" → "norms/drmas"'),
        ("group_size", "group_size = 2", "group_size = 4", "trainer.group_size: 2 → 4"),
        ("prompts_per_step", "prompts_per_step = 1", "prompts_per_step = 2", "trainer.prompts_per_step: 1 → 2"),
        ("reward", 'component = "math/boxed"', 'component = "math/gsm8k"', 'rewards[0].component: "math/boxed" → "math/gsm8k"'),
        ("dtype f32 → bf16", 'id = "lm"', 'id = "lm"\ndtype = "bf16"', "models[lm].dtype: f32 → bf16"),
        ("model path to other weights of the same shapes", f'path = "{TINY}"', f'path = "{other}"', "models[lm].files[model.safetensors]: sha256 "),
    ]
    for name, old, new, words in edits:
        exp.write_text(original.replace(old, new, 1))
        refuses(g, f"resume after editing {name}", ["train", exp, "--quiet", "--resume", "--steps", "2"],
                ["the experiment differs", words, "--accept-changes"])
    exp.write_text(original)
    (x / "tasks.jsonl").write_text("".join(tasks.splitlines(keepends=True)[:2]))
    refuses(g, "resume after the data file shrank", ["train", exp, "--quiet", "--resume", "--steps", "2"], ["data.train: sha256 ", "--accept-changes"])
    (x / "tasks.jsonl").write_text(tasks.replace("+ 1?", "+ 2?"))
    refuses(g, "resume after the data file was replaced (same rows, other tasks)", ["train", exp, "--quiet", "--resume", "--steps", "2"], ["data.train: sha256 ", "--accept-changes"])
    (x / "tasks.jsonl").write_text(tasks)
    # Own: a reformatted file with a default spelled out is the same experiment.
    exp.write_text(original.replace("[workflow]\n", "# reformatted\n[workflow]\nmax_turns = 4\n").replace('id = "lm"', 'id = "lm"\nlr = 0.000001'))
    p = train(exp, "--resume", "--steps", "2")
    case(g, "a reformatted experiment (comments, defaults spelled out) resumes as no change", p.returncode == 0, p.stderr[-300:])
    exp.write_text(original.replace("group_size = 2", "group_size = 4"))
    p = train(exp, "--resume", "--steps", "3", "--accept-changes")
    rec = x / "run/changes.jsonl"
    ok = p.returncode == 0 and rec.is_file() and "trainer.group_size" in rec.read_text()
    case(g, "--accept-changes goes on and records the change in changes.jsonl", ok, p.stderr[-300:])
    exp.write_text(original)

    # 9. A checkpoint's parts are checked against its manifest and each other.
    def fresh(name, steps="2"):
        x = mk(d / name)
        # An entropy bonus: every step moves the moments (the tiny model earns no reward).
        exp = experiment(x, trainer="save_every = 1\nentropy_coef = 0.01")
        p = train(exp, "--steps", steps)
        assert p.returncode == 0, p.stderr
        return x, exp

    x, exp = fresh("renamed")
    (x / "run/checkpoints/step-000002").rename(x / "run/checkpoints/step-000003")
    refuses(g, "trainer_state step 2 inside step-000003", ["train", exp, "--quiet", "--resume", "--steps", "4"], ["`step` is 2", "step-000003"])
    x, exp = fresh("bitflip")
    o = x / "run/checkpoints/step-000002/lm/optimizer.safetensors"
    b = bytearray(o.read_bytes())
    b[-1] ^= 1
    o.write_bytes(bytes(b))
    refuses(g, "a flipped bit in optimizer.safetensors", ["train", exp, "--quiet", "--resume", "--steps", "3"], ["optimizer.safetensors", "MANIFEST.sha256", "changed after"])
    x, exp = fresh("swapped")
    shutil.copy(x / "run/checkpoints/step-000001/lm/optimizer.safetensors", x / "run/checkpoints/step-000002/lm/optimizer.safetensors")
    refuses(g, "an optimizer file from another checkpoint", ["train", exp, "--quiet", "--resume", "--steps", "3"], ["optimizer.safetensors", "MANIFEST.sha256"])
    x, exp = fresh("config")
    c = x / "run/checkpoints/step-000002/lm/config.json"
    cfg = json.loads(c.read_text())
    cfg["num_hidden_layers"] = cfg["num_hidden_layers"] + 1
    c.write_text(json.dumps(cfg))
    refuses(g, "a checkpoint's config.json edited", ["train", exp, "--quiet", "--resume", "--steps", "3"], ["config.json", "MANIFEST.sha256"])
    (x / "run/checkpoints/step-000002/MANIFEST.sha256").unlink()
    s = x / "run/checkpoints/step-000002/trainer_state.json"
    st = json.loads(s.read_text())
    st["format"] = 1
    st.pop("fingerprint", None)
    s.write_text(json.dumps(st))
    refuses(g, "  ... also in a checkpoint without a manifest (an older drmas): config vs weights", ["train", exp, "--quiet", "--resume", "--steps", "3"], ["config.json", "num_hidden_layers"])
    x, exp = fresh("nomanifest")
    (x / "run/checkpoints/step-000002/MANIFEST.sha256").unlink()
    refuses(g, "a checkpoint's manifest deleted", ["train", exp, "--quiet", "--resume", "--steps", "3"], ["MANIFEST.sha256 is missing"])
    x, exp = fresh("lost-line")
    m = x / "run/metrics.jsonl"
    lines = m.read_text().splitlines(keepends=True)
    m.write_text(lines[1])
    refuses(g, "a metrics.jsonl line deleted", ["train", exp, "--quiet", "--resume", "--steps", "3"], ["metrics.jsonl", "line 1 is step 2", "step 1 has no line"])
    m.write_text(lines[0] + lines[0] + lines[1])
    refuses(g, "a metrics.jsonl line duplicated", ["train", exp, "--quiet", "--resume", "--steps", "3"], ["metrics.jsonl", "line 2 is step 1 again"])
    m.write_text("".join(lines))
    p = train(exp, "--resume", "--steps", "3")
    case(g, "  ... and put back, it resumes", p.returncode == 0 and logged(x) == [1, 2, 3], p.stderr[-300:])

    # Messages: what is wrong with the folder, not "continue it with --resume".
    x = mk(d / "metrics-dir")
    exp = experiment(x)
    mk(x / "run/metrics.jsonl")
    for extra in [[], ["--resume"]]:
        p = run(["train", exp, "--quiet", *extra])
        case(g, f"metrics.jsonl is a folder (train {' '.join(extra)})".replace(" )", ")"),
             clean(p) and "is a folder, not the run's metrics log" in p.stderr and "continue it with --resume" not in p.stderr, p.stderr[-300:])
    x = mk(d / "ckpt-file")
    exp = experiment(x)
    mk(x / "run")
    (x / "run/checkpoints").write_text("")
    refuses(g, "checkpoints is a file", ["train", exp, "--quiet", "--resume"], ["checkpoints", "is a file, not the run's folder of checkpoints"])
    x = mk(d / "busy")
    exp = experiment(x, trainer="save_every = 1")
    assert train(exp).returncode == 0
    child = subprocess.Popen([str(DRMAS), "train", exp, "--quiet", "--resume", "--steps", "400"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while len(logged(x)) < 2 and time.time() < deadline and child.poll() is None:
        time.sleep(0.05)
    p = run(["train", exp, "--quiet"])
    case(g, "a fresh train on a folder another process is training names its pid",
         clean(p) and f"in use by another drmas process (pid {child.pid})" in p.stderr, p.stderr[-300:])
    child.kill()
    child.wait()


def g9_inputs_and_limits(tmp):
    """An output that is an input; locks whatever happens to the lock file; counts and
    texts measured before they are allocated or processed."""
    g = "inputs/limits"
    d = tmp / "g9"
    d.mkdir()
    rows = d / "in.jsonl"
    text = json.dumps({"id": 1, "completion": "\\boxed{2}", "answer": "2"}) + "\n"
    rows.write_text(text)
    refuses(g, "score FILE --out FILE", ["score", "math/boxed", rows, "--out", rows], ["is the completions", "write somewhere else"])
    os.link(rows, d / "hard.jsonl")
    refuses(g, "score --out a hard link of the input", ["score", "math/boxed", rows, "--out", d / "hard.jsonl"], ["is the completions"])
    (d / "link.jsonl").symlink_to(rows)
    refuses(g, "score --out a symlink to the input, spelled with ..", ["score", "math/boxed", d / "link.jsonl", "--out", d / "x/../in.jsonl"], ["is the completions"])
    case(g, "  ... and the input is untouched", rows.read_text() == text)
    m = d / "m"
    shutil.copytree(TINY, m)
    (m / ".drmas-model").write_text("")  # a folder drmas wrote: --force may replace it
    before = (m / "model.safetensors").read_bytes()
    refuses(g, "model merge --base M --out M --force", ["model", "merge", "--base", m, "--adapter", m, "--out", m, "--force"], ["is the base"])
    refuses(g, "model merge --out inside the base", ["model", "merge", "--base", m, "--adapter", m, "--out", m / "merged"], ["is inside the base"])
    refuses(g, "model import --force over the folder holding the file", ["model", "import", m / "model.safetensors", m, "--force"], ["holds the GGUF file"])
    case(g, "  ... and the base is untouched", (m / "model.safetensors").read_bytes() == before and not (m / "merged").exists())
    exp = experiment(mk(d / "e"))
    refuses(g, "eval --out over its own data file", ["eval", exp, "--out", d / "e/tasks.jsonl"], ["is the data file"])
    refuses(g, "eval --out inside the model folder", ["eval", exp, "--out", TINY / "eval.json"], ["is inside model `lm`'s folder"])
    case(g, "  ... and nothing was written there", not (TINY / "eval.json").exists())
    inside = experiment(mk(d / "i"), output_dir=False, extra_top=f'output_dir = "{TINY / "run"}"\n')
    refuses(g, "output_dir inside a model folder (check)", ["check", inside], ["is inside model `lm`'s folder"])
    refuses(g, "output_dir = \"\"", ["check", experiment(mk(d / "empty"), output_dir=False, extra_top='output_dir = ""\n')], ["output_dir", "current folder"])
    refuses(g, "output_dir on a read-only place (check)", ["check", experiment(mk(d / "ro"), output_dir=False, extra_top='output_dir = "/proc/drmas-run"\n')], ["output_dir", "cannot be created"])

    # The run lock holds when its file is deleted.
    t = mk(d / "t")
    exp2 = experiment(t, trainer="save_every = 1")
    child = subprocess.Popen([str(DRMAS), "train", exp2, "--quiet", "--steps", "200"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not (t / "run/.lock").exists() and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    try:
        (t / "run/.lock").unlink()
    except FileNotFoundError:
        pass
    p = run(["train", exp2, "--resume", "--quiet"])
    case(g, "a deleted RUN/.lock does not let a second trainer in", clean(p) and f"pid {child.pid}" in p.stderr, p.stderr[-300:])
    child.kill()
    child.wait()

    # Counts and texts measured first.
    def sized(name, pps, gs):
        e = experiment(mk(d / name))
        e.write_text(e.read_text().replace("prompts_per_step = 1\ngroup_size = 2", f"prompts_per_step = {pps}\ngroup_size = {gs}"))
        return e
    refuses(g, "prompts_per_step = 4294967295 (check)", ["check", sized("pps", 4294967295, 2)], ["trainer.prompts_per_step", "GiB", "lower prompts_per_step"])
    refuses(g, "prompts_per_step = group_size = 65536 (check)", ["check", sized("pg", 65536, 65536)], ["episodes a step", "GiB"])
    refuses(g, "  ... and train refuses it before step 1", ["train", sized("pg2", 65536, 65536), "--quiet"], ["episodes a step", "GiB"])
    refuses(g, "eval_k = 100000000 names the key and its place", ["check", experiment(mk(d / "ek"), trainer="eval_every = 1\neval_k = 100000000")], ["trainer.eval_k", "exp.toml:", "lower eval_k"])
    big = mk(d / "big")
    q = "What is " + "1+" * 5_000_000 + "1?"
    e3 = experiment(big)
    (big / "tasks.jsonl").write_text(json.dumps({"id": "big", "question": q, "answer": "2"}) + "\n")
    t0 = time.time()
    p = run(["eval", e3, "--k", "1"])
    took = time.time() - t0
    case(g, "a 10 MB question is refused by its bytes, before tokenizing", clean(p) and "refused before tokenizing" in p.stderr and took < HANG, f"{took:.1f} s: {p.stderr[-300:]}")
    p = run(["check", experiment(mk(d / "mb"), trainer="micro_batch_tokens = 1", sampling="max_new_tokens = 1")])
    case(g, "micro_batch_tokens = 1 is a warning at its key", p.returncode == 0 and "warning:" in p.stderr and "trainer.micro_batch_tokens" in p.stderr, p.stderr[-300:])
    ea = mk(d / "ea")
    e4 = experiment(ea)
    (ea / "tasks.jsonl").write_text(json.dumps({"id": "a", "question": "q", "answer": ""}) + "\n")
    refuses(g, "answer = \"\" as a gold answer", ["check", e4], ["answer", "is empty"])


def g10_messages(tmp):
    """Messages that used to be unclear, and plugin hardening."""
    g = "messages/hardening"
    d = tmp / "g10"
    d.mkdir()
    u = mk(d / "utf8")
    e = experiment(u)
    (u / "tasks.jsonl").write_bytes(b'{"id": "a", "question": "q", "answer": "1"}\n{"id": "b", "question": "caf\xe9", "answer": "2"}\n')
    refuses(g, "invalid UTF-8 in a data row names the line", ["eval", e, "--k", "1"], ["tasks.jsonl:2", "not valid UTF-8"])
    b = mk(d / "bom")
    e = experiment(b)
    (b / "tasks.jsonl").write_bytes(b"\xef\xbb\xbf" + TASKS.encode())
    p = run(["eval", e, "--k", "1", "--out", b / "r.json"])
    case(g, "a UTF-8 BOM is skipped", p.returncode == 0, p.stderr[-300:])
    parent = d / "shared"
    plugins = mk(parent / "plugins")
    shutil.copy(PLUGINS / "good.so", plugins / "good.so")
    os.chmod(plugins / "good.so", 0o644)
    os.chmod(parent, 0o777)
    p = run(["plugins", "list", "--plugin-dir", plugins])
    case(g, "a plugin folder under a world-writable, non-sticky parent is refused", "without the sticky bit" in p.stdout + p.stderr and "good/echo" not in p.stdout, (p.stdout + p.stderr)[-300:])
    os.chmod(parent, 0o1777)
    p = run(["plugins", "list", "--plugin-dir", plugins])
    case(g, "  ... and loads when the parent is sticky", "good/echo" in p.stdout, (p.stdout + p.stderr)[-300:])
    os.chmod(parent, 0o755)
    # The batching keys of [pool] (reproducible batching), each refused at its key.
    for key, value, words in [("max_batch_rows", "0", ["pool.max_batch_rows", "must be 1 to"]),
                              ("gather_window_ms", "100000", ["pool.gather_window_ms", "must be 0 to"]),
                              ("episode_threads", "0", ["pool.episode_threads", "must be 1 to"]),
                              ("batching", '"fast"', ["pool.batching", "deterministic"])]:
        e = experiment(mk(d / f"pool-{key}"))
        e.write_text(e.read_text().replace('devices = ["cpu"]', f'devices = ["cpu"]\n{key} = {value}'))
        refuses(g, f"[pool] {key} = {value}", ["check", e], words)
    mis = mk(d / "mis")
    shutil.copy(PLUGINS / "misbehave.so", mis / "misbehave.so")
    rows = d / "rows.jsonl"
    rows.write_text(json.dumps({"id": "t3", "completion": "x", "answer": "2"}) + "\n")
    p = run(["score", "misbehave/flaky", rows, "--plugin-dir", mis], env={"RUST_BACKTRACE": "1"})
    case(g, "a caught plugin panic is one line, no panic block or backtrace",
         p.returncode == 1 and p.stderr.count("\n") <= 1 and "(at tests/fixtures/misbehave/src/lib.rs:" in p.stderr and "stack backtrace" not in p.stderr,
         p.stderr[-400:])


# Servers the groups started: a group that fails midway leaves its server running, and
# the matrix stops it after the group (a leaked process would outlive the matrix).
SERVERS = []


def stop_leftover_servers():
    while SERVERS:
        proc = SERVERS.pop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def serve_index(index, *flags, **popen):
    """`drmas index serve INDEX` on a free loopback port: (process, (host, port))."""
    proc = subprocess.Popen([str(DRMAS), "index", "serve", index, "--addr", "127.0.0.1:0", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)
    SERVERS.append(proc)
    for line in proc.stdout:
        if line.startswith("listening on http://"):
            host, port = line.split("//")[1].split("/")[0].split(":")
            return proc, (host, int(port))
    proc.kill()
    raise RuntimeError("the server printed no address: " + proc.stderr.read()[-300:])


def g7_search_server(tmp):
    """`drmas index serve` against what a hostile client sends: work, slow sockets, floods."""
    import socket
    g = "search server"
    d = mk(tmp / "g7")
    words = ("river mountain capital city music history science language island war king "
             "ocean forest desert empire planet battle novel painter bridge").split()
    with open(d / "corpus.jsonl", "w") as f:
        for i in range(2000):
            text = " ".join(words[(i * 7 + j * 3) % len(words)] for j in range(60))
            f.write(json.dumps({"id": str(i), "title": f"Passage {i}", "text": text}) + "\n")
    p = run(["index", "build", d / "corpus.jsonl", d / "index"])
    if p.returncode != 0:
        case(g, "build the matrix index", False, p.stderr[-300:])
        return

    def serve(*flags):
        return serve_index(d / "index", *flags)

    def post(addr, body, timeout=60):
        """(status, detail or parsed body) of one request on its own connection."""
        import http.client
        c = http.client.HTTPConnection(*addr, timeout=timeout)
        try:
            c.request("POST", "/retrieve", body=body, headers={"content-type": "application/json"})
            r = c.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data)
            except ValueError:
                return r.status, data[:200]
        except OSError as e:
            # A server that hangs or dies fails the case; it does not end the matrix.
            return None, f"no answer: {e!r}"
        finally:
            c.close()

    def normal_ok(addr):
        try:
            s, b = post(addr, json.dumps({"queries": ["capital city", "river"], "topk": 3}), timeout=HANG)
            return s == 200 and len(b["result"]) == 2 and len(b["result"][0]) == 3
        except Exception:
            return False

    def peak_rss_mb(proc):
        for line in open(f"/proc/{proc.pid}/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return -1

    def closed(sock):
        """Whether the server closed `sock` (EOF or reset), without blocking."""
        sock.setblocking(False)
        try:
            while True:
                if not sock.recv(65536):
                    return True
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            sock.setblocking(True)

    def stop(proc):
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        return proc.returncode

    # Work: the request that aborted the server, and an answer too large to build.
    proc, addr = serve()
    queries = ["what is the capital city of the river island in the northern ocean"] * 10_000
    body = json.dumps({"queries": queries, "topk": 1000})
    t = time.time()
    status, b = post(addr, body)
    took = time.time() - t
    detail = b.get("detail", "") if isinstance(b, dict) else str(b)
    case(g, f"10,000 queries × topk 1000 ({len(body) / 1e6:.1f} MB) refused by name in {took:.2f} s",
         status == 422 and "--max-hits" in detail and "10000 queries × topk 1000" in detail
         and normal_ok(addr) and peak_rss_mb(proc) < 500, f"{status} {detail} peak {peak_rss_mb(proc):.0f} MB")
    rc = stop(proc)
    case(g, "  ... and the server stops cleanly on Ctrl-C", rc == 0, f"exit {rc}")
    proc, addr = serve("--max-response-bytes", "1MiB")
    status, b = post(addr, json.dumps({"queries": queries[:2000], "topk": 30}))
    detail = b.get("detail", "") if isinstance(b, dict) else str(b)
    case(g, "an answer over --max-response-bytes is refused while it is built",
         status == 422 and "--max-response-bytes of 1 MiB" in detail and normal_ok(addr)
         and peak_rss_mb(proc) < 500, f"{status} {detail}")
    stop(proc)

    # Slow sockets: a head trickled a byte at a time, a body that never ends.
    proc, addr = serve("--header-timeout", "1", "--body-timeout", "1")
    # Timed from before the connection: the server's header clock cannot start earlier.
    t = time.time()
    s = socket.create_connection(addr)
    s.sendall(b"POST /retrieve HTTP/1.1\r\nhost: x\r\nx-slow: ")
    while time.time() - t < HANG and not closed(s):
        try:
            s.sendall(b"a")
        except OSError:
            break
        time.sleep(0.1)
    took = time.time() - t
    case(g, f"a head trickled a byte per 100 ms is closed after --header-timeout 1 ({took:.1f} s)",
         1 <= took < HANG and normal_ok(addr), f"open for {took:.1f} s")
    s.close()
    s = socket.create_connection(addr)
    s.settimeout(HANG)
    s.sendall(b"POST /retrieve HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{\"queries\"")
    answer = b""
    try:
        while chunk := s.recv(65536):
            answer += chunk
    except OSError:
        pass
    s.close()
    case(g, "a body that never ends gets 408 naming --body-timeout",
         answer.startswith(b"HTTP/1.1 408") and b"--body-timeout of 1 s" in answer and normal_ok(addr),
         answer[:300])
    stop(proc)

    # Floods: 300 idle sockets past --max-connections 16, 10 clients that never read.
    proc, addr = serve("--max-connections", "16", "--idle-timeout", "2")
    flood = [socket.create_connection(addr) for _ in range(300)]
    answered = sum(normal_ok(addr) for _ in range(20))
    t = time.time()
    while time.time() - t < HANG and not all(closed(s) for s in flood):
        time.sleep(0.2)
    gone = sum(closed(s) for s in flood)
    for s in flood:
        s.close()
    case(g, "an idle flood of 300 sockets past --max-connections 16: the client gets its answers",
         answered == 20 and gone == 300, f"{answered} of 20 answered, {gone} of 300 closed by the server")
    def sockets(proc):
        n = 0
        for fd in os.listdir(f"/proc/{proc.pid}/fd"):
            try:
                n += os.readlink(f"/proc/{proc.pid}/fd/{fd}").startswith("socket:")
            except FileNotFoundError:
                # Closed between the listing and the read (the server drops
                # connections while we count; a loaded machine widens the window).
                pass
        return n
    listening = sockets(proc)
    body = json.dumps({"queries": queries[:200], "topk": 100}).encode()
    deaf = []
    for _ in range(10):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(addr)
        s.sendall(b"POST /retrieve HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        deaf.append(s)
    answered = sum(normal_ok(addr) for _ in range(10))
    t = time.time()
    while time.time() - t < HANG and sockets(proc) > listening:
        time.sleep(0.2)
    held = sockets(proc) - listening
    for s in deaf:
        s.close()
    case(g, "10 clients that never read their ~7 MB answers are dropped after --idle-timeout; others are answered",
         answered == 10 and held == 0 and normal_ok(addr), f"{answered} of 10 answered, {held} connections still held")
    stop(proc)

    refuses(g, "--max-connections 0", ["index", "serve", d / "index", "--max-connections", "0"],
            ["'--max-connections <N>'", "must be at least 1"])
    refuses(g, "--header-timeout 0", ["index", "serve", d / "index", "--header-timeout", "0"],
            ["'--header-timeout <SECS>'", "more than 0 seconds"])


def nan_scan_cost():
    """Seconds the NaN/Inf scan of SmolLM2-135M's weights takes in one load (drmas logs
    it at debug level), and the whole load+generate time around it."""
    smol = ROOT / "models/smollm2-135m-instruct"
    if not (smol / "model.safetensors").is_file():
        return None
    scans, totals = [], []
    for _ in range(3):
        t = time.time()
        p = run(["generate", "--model", smol, "--prompt", "hi", "--max-new-tokens", "1", "--device", "cpu"],
                env={"DRMAS_LOG": "debug"})
        totals.append(time.time() - t)
        for line in p.stderr.splitlines():
            if "checked for NaN" in line and "seconds=" in line:
                scans.append(float(line.split("seconds=")[1].split()[0]))
    return min(scans) if scans else None, min(totals)


def sync_rename_cost(dir_, size, n=50):
    """Seconds per write of `size` bytes: the way drmas writes (temporary, fsync,
    rename, fsync of the folder) against a plain write, on the same filesystem."""
    data = os.urandom(size)
    target = dir_ / "cost.bin"

    def plain():
        with open(target, "wb") as f:
            f.write(data)

    def atomic():
        tmp = dir_ / f".cost.bin.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, target)
        fd = os.open(dir_, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)

    out = {}
    for name, fn in [("plain", plain), ("atomic", atomic)]:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        out[name] = (time.perf_counter() - t) / n
    return out


def g11_tracking(tmp):
    g = "tracking"
    d = tmp / "g11"
    d.mkdir()

    def with_tracking(n, text):
        x = d / n
        x.mkdir()
        e = experiment(x)
        e.write_text(e.read_text() + "\n[tracking]\n" + text + "\n")
        return e

    refuses(g, "an https:// MLflow address (no TLS in the client)",
            ["check", with_tracking("a", 'mlflow = { uri = "https://mlflow.example", experiment = "e" }')],
            ["tracking.mlflow.uri", "is not an http:// address"])
    refuses(g, "an MLflow experiment without a name",
            ["check", with_tracking("b", 'mlflow = { uri = "http://127.0.0.1:5000", experiment = " " }')],
            ["tracking.mlflow.experiment", "must name the MLflow experiment"])
    refuses(g, "a misspelt [tracking] key", ["check", with_tracking("c", "tensorbord = true")],
            ["unknown field `tensorbord`"])
    refuses(g, "sample tables of zero samples",
            ["check", with_tracking("d", "log_samples_every = 1\nsamples_per_agent = 0")],
            ["samples_per_agent", "must be at least 1"])
    # A tracker that is down never stops training: the run finishes, warns, counts the gap.
    e = with_tracking("e", 'mlflow = { uri = "http://127.0.0.1:9", experiment = "e" }')
    p = run(["train", e, "--quiet"])
    record = d / "e" / "run" / "tracking" / "mlflow.json"
    ok = p.returncode == 0 and "tracking: MLflow at" in p.stderr and record.is_file()
    case(g, "an MLflow server that is down: the run trains, warns and records the gap", ok,
         f"exit {p.returncode}: {p.stderr.strip()[-400:]}")



def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Background:
    """A drmas process in a process group of its own, killed whole at the end."""

    def __init__(self, args, env=None, **kw):
        e = dict(os.environ)
        e.pop("DRMAS_PLUGIN_PATH", None)
        e.update(env or {})
        self.proc = subprocess.Popen([str(DRMAS)] + [str(a) for a in args], env=e, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)

    def state(self):
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            return "gone"

    def finish(self, timeout=HANG):
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            out, err = self.proc.communicate()
        return self.proc.returncode, out, err

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass


def wait_for(what, done, every=0.05):
    t = time.time()
    while not done():
        if time.time() - t > HANG:
            raise RuntimeError(f"{what}: not within {HANG} s")
        time.sleep(every)


class Stub:
    """A loopback HTTP server answering every POST with reply(path, body) -> (status, text),
    or holding the connection unanswered when reply is None."""

    def __init__(self, reply):
        import http.server
        import threading
        stub = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if reply is None:
                    stub.held.append(self.connection)
                    stub.release.wait()
                    return
                status, text = reply(self.path, json.loads(body or b"{}"))
                data = text.encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST

            def log_message(self, *a):
                pass

        self.held = []
        self.release = threading.Event()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.server.shutdown()


def two_models(d, trainer="save_every = 1"):
    """The matrix experiment with a solver and a verifier, one model each."""
    agents = f"""
[[models]]
id = "verifier-lm"
path = "{TINY}"

[[agents]]
name = "solver"
component = "math/solver"
model = "lm"
sampling = {{ max_new_tokens = 6 }}

[[agents]]
name = "verifier"
component = "math/verifier"
model = "verifier-lm"
sampling = {{ max_new_tokens = 6 }}
"""
    return experiment(d, agents=agents, trainer=trainer)


def g12_outputs_ranks_checkpoints(tmp):
    """Round 3: an output taken at the command's start, ranks that must run one experiment,
    a store port another program holds, checkpoints the manifest does not vouch for."""
    g = "runs and ranks"
    d = mk(tmp / "g12")

    # Two evals of one report: the second is refused while the first holds it.
    x = mk(d / "eval")
    exp = experiment(x)
    first = Background(["eval", exp, "--k", "1", "--out", x / "r.json"], env={"DRMAS_FAULT_POINT": "outputs-locked:stop"})
    try:
        wait_for("the first eval holds its outputs", lambda: first.state() in ("T", "gone"))
        p = run(["eval", exp, "--k", "1", "--out", x / "r.json"])
        case(g, "a second `eval --out r.json` while the first holds it is refused naming its pid",
             clean(p) and "is in use by another drmas process" in p.stderr and f"pid {first.proc.pid}" in p.stderr
             and not (x / "r.json").exists(), f"exit {p.returncode}: {p.stderr[-300:]}")
        os.kill(first.proc.pid, signal.SIGCONT)
        rc, _, err = first.finish()
        case(g, "  ... and the first, continued, writes its report", rc == 0 and (x / "r.json").is_file(), err[-300:])
    finally:
        first.kill()

    def ranks(exp, port, extra=((), ())):
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2"}
        r1 = Background(["train", exp, "--quiet", *extra[1]], env={**env, "RANK": "1"})
        r0 = Background(["train", exp, "--quiet", *extra[0]], env={**env, "RANK": "0"})
        try:
            return r0.finish(), r1.finish()
        finally:
            r0.kill()
            r1.kill()

    x = mk(d / "seeds")
    exp = experiment(x)
    (rc0, _, e0), (rc1, _, e1) = ranks(exp, free_port(), (["--set", "experiment.seed=7"], ["--set", "experiment.seed=8"]))
    words = ["the ranks do not run the same experiment", "experiment.seed: rank 0 has 7, rank 1 has 8"]
    case(g, "ranks started with different seeds are refused on every rank, naming the difference",
         rc0 not in (0, 101, None) and rc1 not in (0, 101, None) and all(w in e0 and w in e1 for w in words)
         and not (x / "run/metrics.jsonl").exists(), f"{rc0} {rc1}: {e0[-200:]} | {e1[-200:]}")

    import socket
    x = mk(d / "port")
    exp = experiment(x, extra_top="", trainer="")
    exp.write_text(exp.read_text().replace('devices = ["cpu"]', 'devices = ["cpu"]\ncollective_timeout_s = 2'))
    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    t = time.time()
    try:
        (rc0, _, e0), (rc1, _, e1) = ranks(exp, port)
    finally:
        holder.close()
    took = time.time() - t
    case(g, f"MASTER_PORT held by another program: both ranks fail naming it ({took:.0f} s)",
         rc0 not in (0, 101, None) and rc1 not in (0, 101, None)
         and "cannot host the job's store" in e0 and f"port {port} is in use by another program" in e0
         and "gave no answer within 2 s" in e1 and "collective_timeout_s" in e1, f"{rc0} {rc1}: {e0[-200:]} | {e1[-200:]}")

    # A checkpoint whose deletion did not finish is removed by the next writer.
    x = mk(d / "half")
    exp = experiment(x, trainer="save_every = 1\nkeep_checkpoints = 3")
    p = run(["train", exp, "--quiet", "--steps", "2"])
    (x / "run/checkpoints/step-000001/trainer_state.json").unlink()
    p = run(["train", exp, "--quiet", "--resume", "--steps", "3"])
    case(g, "a half-deleted checkpoint is removed by the next writer, saying why",
         p.returncode == 0 and "step-000001" in p.stderr and "not a complete checkpoint" in p.stderr
         and "MANIFEST.sha256 lists trainer_state.json, which is missing" in p.stderr
         and not (x / "run/checkpoints/step-000001").exists(), f"exit {p.returncode}: {p.stderr[-300:]}")

    # Optimizer states swapped between two models' folders.
    x = mk(d / "swap")
    exp = two_models(x)
    p = run(["train", exp, "--quiet", "--steps", "1"])
    ck = x / "run/checkpoints/step-000001"
    a, b = ck / "lm/optimizer.safetensors", ck / "verifier-lm/optimizer.safetensors"
    if p.returncode == 0 and a.is_file() and b.is_file():
        a.rename(ck / "held")
        b.rename(a)
        (ck / "held").rename(b)
        p = run(["train", exp, "--quiet", "--resume", "--steps", "2"])
        ok = clean(p) and "not a usable checkpoint" in p.stderr and "holds what MANIFEST.sha256 records for verifier-lm/optimizer.safetensors" in p.stderr
    else:
        ok = False
    case(g, "optimizer states swapped between two models' folders are refused on resume", ok,
         f"exit {p.returncode}: {p.stderr[-300:]}")


def g13_engines_streams_overrides(tmp):
    """Round 3: an engine's bad answer, output to a full disk, --set values, a silent MLflow."""
    g = "engines, streams, --set"
    d = mk(tmp / "g13")

    def sglang(path, body):
        if path == "/generate":
            n = int(body.get("sampling_params", {}).get("max_new_tokens", 1))
            ids = [5, 6, 1_000_000_000][:max(n, 1)]
            ids[-1] = 1_000_000_000
            return 200, json.dumps({"output_ids": ids, "meta_info": {
                "output_token_logprobs": [[-1.5, t, None] for t in ids], "finish_reason": {"type": "length"}}})
        return 200, json.dumps({"success": True, "message": "ok"})

    stub = Stub(sglang)
    try:
        x = mk(d / "engine")
        exp = experiment(x)
        p = run(["train", exp, "--quiet", "--set", "workflow.max_failed_episodes=1",
                 "--set", f'models.lm.engine={{ kind = "sglang", url = "{stub.url}", attempts = 1 }}'])
        text = p.stdout + p.stderr
        case(g, "an SGLang answer with id 1000000000 fails its episodes naming the engine, field and value",
             p.returncode in (0, 1) and "panicked" not in text and f"SGLang at {stub.url}" in text
             and "1000000000 is outside the vocabulary of" in text, f"exit {p.returncode}: {text[-400:]}")
    finally:
        stub.close()

    x = mk(d / "full")
    exp = experiment(x)
    with open("/dev/full", "w") as full:
        e = dict(os.environ)
        e.pop("DRMAS_PLUGIN_PATH", None)
        p = subprocess.run([str(DRMAS), "check", str(exp)], stdout=full, stderr=subprocess.PIPE, text=True, env=e, timeout=HANG)
        case(g, "`check >/dev/full` ends 74 saying why, no panic",
             p.returncode == 74 and "cannot write to standard output" in p.stderr and "No space left on device" in p.stderr
             and "panicked" not in p.stderr, f"exit {p.returncode}: {p.stderr[-300:]}")
        p = subprocess.run([str(DRMAS), "train", str(exp)], stdout=subprocess.PIPE, stderr=full, text=True, env=e, timeout=HANG)
        case(g, "`train 2>/dev/full` trains and ends 74, not 101", p.returncode == 74, f"exit {p.returncode}")

    refuses(g, "--set with two values (a newline in the value)", ["check", experiment(mk(d / "set")), "--set", "trainer.steps=2\nbogus_key = 99"],
            ["must be exactly one TOML value", "bogus_key"])
    x = mk(d / "clip")
    p = run(["check", experiment(x, trainer="clip = { low = 0.2, high = 0.28, dual = 3.0 }"), "--set", "trainer.clip={ low = 0.3 }"])
    case(g, "--set of a table that drops keys warns naming them",
         p.returncode == 0 and "replaces the whole table" in p.stderr and "`dual`, `high` are no longer set" in p.stderr,
         f"exit {p.returncode}: {p.stderr[-300:]}")

    silent = Stub(None)
    try:
        x = mk(d / "mlflow")
        exp = experiment(x)
        p = run(["train", exp, "--quiet", "--set", "trainer.steps=2", "--set",
                 f'tracking={{ mlflow = {{ uri = "{silent.url}", experiment = "x", grace_s = 1 }} }}'])
        record = x / "run/tracking/mlflow.json"
        r = json.loads(record.read_text()) if record.is_file() else {}
        case(g, "an MLflow server that never answers: the run ends and mlflow.json records the lost steps",
             p.returncode == 0 and "had not taken everything after 1 s" in p.stderr and r.get("gaps") == [1, 2]
             and r.get("incomplete") is True, f"exit {p.returncode}: {p.stderr[-300:]} {r}")
    finally:
        silent.close()


def g14_sweeps_placement_smaller(tmp):
    """Round 3: sweep files checked before any run, the placement refusal, the shipped engine
    config, and the smaller ones (a 65 MB body, duplicated steps, a retriever's timeout)."""
    g = "sweeps, placement"
    d = mk(tmp / "g14")
    x = mk(d / "sweep")
    exp = experiment(x)

    def sweep_file(where, base, extra="", steps=1):
        where.parent.mkdir(parents=True, exist_ok=True)
        where.write_text(f"""[sweep]
name = "m"
base = "{base}"
output_dir = "{x / 'out'}"
seeds = [1]
baseline = "grpo"

[sweep.set]
"trainer.steps" = {steps}

[[arms]]
name = "grpo"
set = {{ "normalizer.component" = "norms/grpo" }}

[[arms]]
name = "drmas"
set = {{ "normalizer.component" = "norms/drmas" }}

[eval]
k = 1

[[verdicts]]
claim = "C1"
arm = "drmas"
metric = "avg_at_k"
holds_if = "above"
{extra}""")
        return where

    s = sweep_file(x / "s1.toml", exp, '\n[[verdicts]]\nclaim = "C2"\narm = "drmas"\nmetric = "spikes"\nmodel = "nosuch-lm"\nholds_if = "below"\n')
    p = refuses(g, "a verdict naming a model that does not exist is refused before any run", ["sweep", s],
                ["verdict", "no model `nosuch-lm`", "its models are"])
    case(g, "  ... and nothing ran", not (x / "out").exists())
    s = sweep_file(x / "sweeps/s2.toml", "../exp.toml")
    p = run(["sweep", s, "--status"], cwd=tmp)
    case(g, "a relative base is read from the sweep file's folder", p.returncode == 0, p.stderr[-300:])
    s = sweep_file(x / "sweeps/s3.toml", "../nope.toml")
    refuses(g, "a missing relative base names the sweep file and the path it resolved", ["sweep", s],
            ["sweep.base", "read from the sweep file's folder as", str(x / "nope.toml"), "cannot be read"])
    s = sweep_file(x / "s4.toml", exp)
    p = run(["sweep", s])
    if p.returncode == 0:
        sweep_file(x / "s4.toml", exp, steps=3)
        refuses(g, "a sweep file edited after its runs (steps 1 → 3) is refused naming the runs and the change", ["sweep", s],
                ["were made with settings this sweep no longer asks for", "trainer.steps: 1 → 3", "move these run folders away"])
    else:
        case(g, "a sweep of two one-step runs finishes", False, p.stderr[-300:])

    smol = ROOT / "configs/math-drmas.toml"
    if (ROOT / "models/smollm2-135m-instruct/model.safetensors").is_file():
        refuses(g, "a team that does not fit says what it asks and what is free", ["train", smol, "--set", "pool.memory_limit_gib=1",
                "--set", f'experiment.output_dir="{d / "placed"}"'], ["do not fit the pool's devices", "cpu needs", "and has 1.0 GiB free",
                "memory_limit_gib = 1", "nothing was loaded"])
        p = run(["check", ROOT / "configs/math-drmas-engine.toml"])
        case(g, "the shipped engine config passes check", p.returncode == 0, p.stderr[-300:])

    # A body of 65 MB over --max-request-bytes is answered 413, not a broken pipe.
    corpus = d / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "a", "title": "A", "text": "alpha beta"}) + "\n")
    run(["index", "build", corpus, d / "index"])
    srv, addr = serve_index(d / "index", "--max-request-bytes", "1KiB", start_new_session=True)
    try:
        import socket
        s = socket.create_connection(addr)
        s.settimeout(HANG)
        body = b"x" * 65_000_000
        sent_ok = True
        try:
            s.sendall(b"POST /retrieve HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
        except OSError:
            sent_ok = False
        answer = b""
        try:
            while chunk := s.recv(65536):
                answer += chunk
        except OSError:
            pass
        s.close()
        case(g, "a 65 MB body over --max-request-bytes gets its 413", sent_ok and answer.startswith(b"HTTP/1.1 413")
             and b"--max-request-bytes" in answer, answer[:200])
    finally:
        os.killpg(srv.pid, signal.SIGKILL)
        srv.wait()

    # A retriever that never answers: the message says the truth about the attempts.
    silent = Stub(None)
    try:
        refuses(g, "`index query` against a server that never answers says its attempts and time",
                ["index", "query", f"{silent.url}/retrieve", "q"], ["per attempt", "3 of 3 attempts timed out", "s in all"])
    finally:
        silent.close()

    # Duplicated steps in a plotted run are said.
    x = mk(d / "plot")
    exp = experiment(x)
    p = run(["train", exp, "--quiet", "--set", "trainer.steps=2"])
    m = x / "run/metrics.jsonl"
    if m.is_file():
        lines = m.read_text().splitlines()
        m.write_text("\n".join(lines + lines[-1:]) + "\n")
        p = run(["plot", x / "run", "--out", x / "plots"])
        case(g, "`drmas plot` of a run with a step written twice warns naming the step",
             "warning:" in p.stderr and "step 2 (lines" in p.stderr and "last line's values" in p.stderr,
             f"exit {p.returncode}: {p.stderr[-300:]}")


def main():
    global DRMAS
    ap = argparse.ArgumentParser()
    ap.add_argument("--drmas", default=str(ROOT / "target/debug/drmas"))
    ap.add_argument("--only", default="", help="comma-separated group functions to run (e.g. g12_outputs_ranks_checkpoints)")
    args = ap.parse_args()
    DRMAS = Path(args.drmas).resolve()
    only = {n for n in args.only.split(",") if n}
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        for g in [g1_outputs, g2_sizes, g3_nonfinite, g4_devices, g5_check, g6_plugins, g7_search_server, g8_run_folder, g9_inputs_and_limits, g10_messages,
                  g11_tracking, g12_outputs_ranks_checkpoints, g13_engines_streams_overrides,
                  g14_sweeps_placement_smaller]:
            if only and g.__name__ not in only:
                continue
            try:
                g(tmp)
            except Exception as e:  # noqa: BLE001
                # A group that cannot go on (an older drmas without a flag it uses) is a
                # failed case, and the other groups still run.
                case(g.__name__, "the group ran to its end", False, repr(e)[-300:])
            finally:
                stop_leftover_servers()
        print("\ncost of the safety")
        for size in [4 << 10, 1 << 20]:
            c = sync_rename_cost(tmp, size)
            print(f"  a {size >> 10} KiB output: plain write {c['plain'] * 1e3:.2f} ms, "
                  f"temporary + fsync + rename + folder fsync {c['atomic'] * 1e3:.2f} ms")
    scan = nan_scan_cost()
    if scan and scan[0] is not None:
        print(f"  NaN/Inf scan of SmolLM2-135M's weights: {scan[0] * 1e3:.0f} ms of a "
              f"{scan[1]:.2f} s load + 1-token generate")
    good = sum(1 for r in results if r[2])
    print(f"\n{good} of {len(results)} cases end in a clean, actionable error or the right behaviour")
    return 0 if good == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
