use drmas::config::{check_components, parse_experiment};
use drmas::plugin::Registry;
use std::path::Path;

const BASE: &str = r#"[experiment]
name = "math-two-agents"
seed = 7

[[models]]
id = "small"
path = "models/qwen-0.5b"

[[agents]]
name = "solver"
component = "math/solver"
model = "small"

[[agents]]
name = "verifier"
component = "math/verifier"
model = "small"

[agents.sampling]
temperature = 0.7
top_p = 0.95

[workflow]
entry = "solver"
max_turns = 4

[[rewards]]
component = "math/exact-match"

[normalizer]
component = "norms/drmas"

[trainer]
steps = 10
group_size = 4

[trainer.clip]
low = 0.2
high = 0.28

[pool]
devices = ["cpu"]
"#;

fn show(name: &str, text: &str) {
    match parse_experiment(Path::new("exp.toml"), text.to_string()) {
        Ok(e) => match check_components(&e, &Registry::builtin()) {
            Ok(c) => println!("== {name}: OK {c:?}"),
            Err(e) => println!("== {name}: COMPONENTS\n{e}"),
        },
        Err(e) => println!("== {name}: PARSE\n{e}"),
    }
}

#[test]
fn explore() {
    show("base", BASE);
    show("unclosed string", &BASE.replace("name = \"math-two-agents\"", "name = \"math-two-agents"));
    show("unclosed table", &BASE.replace("[trainer]", "[trainer"));
    show("unknown trainer key", &BASE.replace("group_size = 4", "group_sise = 4"));
    show("unknown clip key", &BASE.replace("high = 0.28", "hihg = 0.28"));
    show("wrong type", &BASE.replace("steps = 10", "steps = \"10\""));
    show("missing entry", &BASE.replace("entry = \"solver\"\n", ""));
    show("missing normalizer", &BASE.replace("[normalizer]\ncomponent = \"norms/drmas\"\n", ""));
    show("unknown model", &BASE.replace("model = \"small\"\n\n[[agents]]", "model = \"big\"\n\n[[agents]]"));
    show("dup agents", &BASE.replace("name = \"verifier\"", "name = \"solver\""));
    show("entry not agent", &BASE.replace("entry = \"solver\"", "entry = \"critic\""));
    show("temp", &BASE.replace("temperature = 0.7", "temperature = 0.0"));
    show("top_p", &BASE.replace("top_p = 0.95", "top_p = 1.5"));
    show("clip low", &BASE.replace("low = 0.2", "low = 1.0"));
    show("device", &BASE.replace("devices = [\"cpu\"]", "devices = [\"cpu\", \"gpu0\"]"));
    show("semver", &BASE.replace("[[models]]", "[plugins]\nrequire = { norms = \"one point oh\" }\n\n[[models]]"));
    show("plugin dir", &BASE.replace("[[models]]", "[plugins]\ndirs = [\"/nonexistent/plugins\"]\n\n[[models]]"));
    show("nope", &BASE.replace("norms/drmas", "norms/nope"));
    show("noslash", &BASE.replace("norms/drmas", "drmas"));
    show("epsilom", &BASE.replace("component = \"norms/drmas\"", "component = \"norms/drmas\"\nconfig = { epsilom = 1 }"));
    show("epsilom table", &BASE.replace("component = \"norms/drmas\"", "component = \"norms/drmas\"\n\n[normalizer.config]\nepsilom = 1"));
    show("epsilon neg", &BASE.replace("component = \"norms/drmas\"", "component = \"norms/drmas\"\n\n[normalizer.config]\nepsilon = -1.0"));
    show("unknown plugin", &BASE.replace("norms/drmas", "normz/drmas"));
    show("version req", &BASE.replace("[[models]]", "[plugins]\nrequire = { norms = \">=2\" }\n\n[[models]]"));
    show("dup key", &BASE.replace("steps = 10", "steps = 10\nsteps = 20"));
    show("unknown top table", &BASE.replace("[trainer]", "[trainr]"));
    show("agent typo", &BASE.replace("model = \"small\"\n\n[agents.sampling]", "modle = \"small\"\n\n[agents.sampling]"));
    show("sampling typo", &BASE.replace("top_p = 0.95", "top_pp = 0.95"));
    show("dtype", &BASE.replace("path = \"models/qwen-0.5b\"", "path = \"models/qwen-0.5b\"\ndtype = \"fp8\""));
    show("neg steps", &BASE.replace("steps = 10", "steps = -1"));
    show("inline sampling", &BASE.replace("model = \"small\"\n\n[[agents]]", "model = \"small\"\nsampling = { temperature = -1.0 }\n\n[[agents]]"));
    show("only clip", &BASE.replace("[trainer]\nsteps = 10\ngroup_size = 4\n", "").replace("low = 0.2", "low = -0.5"));
    show("empty devices", &BASE.replace("devices = [\"cpu\"]", "devices = []"));
    show("loss agg", &BASE.replace("steps = 10", "loss_agg = \"mean\""));
    show("multi", &BASE.replace("entry = \"solver\"", "entry = \"critic\"").replace("top_p = 0.95", "top_p = 0").replace("devices = [\"cpu\"]", "devices = [\"gpu0\"]"));
    show("crlf", &BASE.replace("\n", "\r\n").replace("low = 0.2", "low = 2.0"));
    show("dup table", &BASE.replace("[pool]", "[trainer]\ngspo = true\n\n[pool]"));
    show("missing value", &BASE.replace("steps = 10", "steps ="));
    show("bare word", &BASE.replace("steps = 10", "steps = ten"));
    show("dup inline", &BASE.replace("devices = [\"cpu\"]", "devices = [\"cpu\"]\ndevices = [\"auto\"]"));
    show("table after array", &BASE.replace("[pool]", "[agents]\nname = \"x\"\n\n[pool]"));
    show("missing model", &BASE.replace("model = \"small\"\n\n[agents.sampling]", "\n[agents.sampling]"));
    show("missing workflow", &BASE.replace("[workflow]\nentry = \"solver\"\nmax_turns = 4\n", ""));
    show("require int", &BASE.replace("[[models]]", "[plugins]\nrequire = { norms = 1 }\n\n[[models]]"));
    show("require dotted", &BASE.replace("[[models]]", "[plugins]\nrequire = { \"my.plugin\" = \"x\" }\n\n[[models]]"));
    show("env", &BASE.replace("[[rewards]]", "[environment]\ncomponent = \"norms/grpo\"\n\n[[rewards]]"));
    show("no agents", &BASE.replace("[[agents]]", "[[agentz]]"));
    show("require dotted bad", &BASE.replace("[[models]]", "[plugins]\nrequire = { \"my.plugin\" = \"nope\" }\n\n[[models]]"));
    show("require dotted int", &BASE.replace("[[models]]", "[plugins]\nrequire = { \"my.plugin\" = 3 }\n\n[[models]]"));
    show("no agents2", &BASE.replace("[[agents]]", "[[agentz]]").replace("[agents.sampling]", "[agentz.sampling]"));
}
