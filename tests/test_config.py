"""Config parsing: defaults, overrides, and one clear message naming the key and the file."""


import pytest

from node.config import FederationConfig, default_methods, from_dict, load
from node.errors import ConfigError
from node.federation import resolve
from tests.helpers import REPO


def write(tmp_path, text):
    path = tmp_path / "fed.toml"
    path.write_text(text)
    return path


def test_defaults_from_an_empty_file(tmp_path):
    config = load(write(tmp_path, ""))
    assert config == FederationConfig(methods=default_methods())
    assert (config.nodes, config.algorithm, config.topology.kind) == (5, "profe", "fully_connected")
    assert config.exchange.codec == "int16" and config.prototype_codec == "int16"


@pytest.mark.parametrize("path", sorted((REPO / "examples").glob("*.toml"))
                         + sorted((REPO / "experiments" / "configs").glob("*.toml")),
                         ids=lambda p: p.name)
def test_shipped_configs_are_valid(path):
    load(path)


def test_values_are_read_and_ints_accepted_for_floats(tmp_path):
    config = load(write(tmp_path, 'nodes = 4\n[train]\nlr = 1\n[topology]\nkind = "ring"\n'))
    assert config.nodes == 4 and config.train.lr == 1.0 and config.topology.kind == "ring"


@pytest.mark.parametrize("text, key", [
    ("nodez = 3", "nodez"),
    ("[data]\ndatasett = 'mnist'", "data.datasett"),
    ("[nonsense]\nx = 1", "nonsense"),
])
def test_unknown_keys_are_named(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"{path}.*unknown key {key}"):
        load(path)


@pytest.mark.parametrize("text, key", [
    ('nodes = "five"', "nodes"),
    ("nodes = 2.5", "nodes"),
    ("[train]\nlr = 'fast'", "train.lr"),
    ("[data]\ndownload = 1", "data.download"),
    ("[model]\nteacher_channels = 32", "model.teacher_channels"),
    ("topology = 3", "topology"),
])
def test_wrong_types_are_named(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"{path}.*{key}"):
        load(path)


@pytest.mark.parametrize("text, key", [
    ("nodes = 0", "nodes"),
    ("[train]\noptimizer = 'lbfgs'", "train.optimizer"),
    ("rounds = 0", "rounds"),
    ("[data]\nclasses_fraction = 1.5", "data.classes_fraction"),
    ("[data]\nalpha = 0", "data.alpha"),
    ("[data]\ndataset = 'svhn'", "data.dataset"),
    ("[data]\npartition = 'shards'", "data.partition"),
    ("[exchange]\ncodec = 'int4'", "exchange.codec"),
    ("algorithm = 'fedsgd'", "algorithm"),
    ("[topology]\nkind = 'torus'", "topology.kind"),
    ("[topology]\nkind = 'file'", "topology.path"),
    ("[timeouts]\nround = 0", "timeouts.round"),
    ("[profe]\ntemperature = 0", "profe.temperature"),
    ("[profe]\norder = 'sideways'", "profe.order"),
    ("[profe]\npreset = 'nebula'", "profe.preset"),
    ("[train]\nadam_betas = [0.9]", "train.adam_betas"),
    ("name = 'a b'", "name"),
    ("[aggregation]\ntrust_memory = 1", "aggregation.trust_memory"),
    ("[aggregation]\nvalidation = -1", "aggregation.validation"),
    ("[aggregation]\njudged_per_round = -1", "aggregation.judged_per_round"),
    ("[aggregation]\njudged_per_round = 2.5", "aggregation.judged_per_round"),
    ("[aggregation]\nheld_influence = 0\nheld_mates = true", "aggregation.held_mates"),
    ("[aggregation]\nheld_floor = -0.5", "aggregation.held_floor"),
    ("[aggregation]\nheld_floor = 101", "aggregation.held_floor"),
    ("[aggregation]\nheld_mix = \"body\"", "aggregation.held_mix"),
    ("[aggregation]\nscreen_budget = \"half\"", "aggregation.screen_budget"),
    ("[aggregation]\nwitnesses = -1", "aggregation.witnesses"),
    ("[aggregation]\nwitnesses = 10001", "aggregation.witnesses"),
    ("[aggregation]\nwitness_memory = 0.4", "aggregation.witness_memory"),
    ("[aggregation]\nwitness_memory = 1.0", "aggregation.witness_memory"),
])
def test_impossible_values_are_named(tmp_path, text, key):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"{path}: {key}"):
        load(path)


HUB = "algorithm = 'fedavg'\n[topology]\nkind = 'star'\nhub = 0\n"


@pytest.mark.parametrize("text, key, words", [
    ("participation = 0", "participation", "must be in (0, 1]"),
    ("participation = 1.5", "participation", "must be in (0, 1]"),
    ("participation = -0.1", "participation", "must be in (0, 1]"),
    ("participation = 'half'", "participation", "must be of type float"),
    ("[topology]\nhub = 0", "topology.hub", 'needs topology.kind = "star"'),
    ("algorithm = 'fedavg'\n[topology]\nkind = 'star'\nhub = 5", "topology.hub",
     "must be a node id in 0..4, got 5"),
    ("algorithm = 'fedavg'\n[topology]\nkind = 'star'\nhub = -1", "topology.hub",
     "must be a node id in 0..4, got -1"),
    ("[topology]\nkind = 'star'\nhub = 0", "topology.hub",
     "needs algorithm 'fedavg', 'fedproto', 'fedhp' (ProFe, FedPR and FedProc send a model"),
    ("algorithm = 'fedproc'\n[topology]\nkind = 'star'\nhub = 0", "topology.hub",
     "got 'fedproc'"),
    ("algorithm = 'fedpr'\n[topology]\nkind = 'star'\nhub = 0", "topology.hub", "got 'fedpr'"),
    ("algorithm = 'fedavg'\nnodes = 1\n[topology]\nkind = 'star'\nhub = 0", "topology.hub",
     "at least one client"),
    (HUB + "[aggregation]\nrule = 'median'", "topology.hub", 'needs aggregation.rule = "mean"'),
    (HUB + "[aggregation]\nuse_plan = false", "topology.hub", "needs the federation's data plan"),
    (HUB + "[data]\nlayout = 'per-node'", "topology.hub", "needs the federation's data plan"),
    ("[train]\nfinal_fit = 'yes'", "train.final_fit", "must be true or false, got 'yes'"),
    ("[train]\nfinal_fit = 1", "train.final_fit", "must be true or false, got 1"),
])
def test_bad_participation_and_hub_are_named_in_one_line(tmp_path, text, key, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: {key} ") and words in message and "\n" not in message


@pytest.mark.parametrize("algorithm", ["fedavg", "fedproto", "fedhp"])
def test_a_hub_serves_fedavg_fedproto_and_fedhp_and_the_final_fit_is_off_by_default(
        tmp_path, algorithm):
    config = load(write(tmp_path, f"algorithm = '{algorithm}'\nparticipation = 0.1\n"
                                  "[topology]\nkind = 'star'\nhub = 0\n"))
    assert (config.topology.hub, config.train.final_fit) == (0, False)
    assert load(write(tmp_path, "[train]\nfinal_fit = true\n")).train.final_fit is True


def test_a_topology_that_disconnects_the_graph_is_refused(tmp_path):
    edges = tmp_path / "split.edgelist"
    edges.write_text("0 1\n2 3\n")
    path = write(tmp_path, f'nodes = 4\n[topology]\nkind = "file"\npath = "{edges}"\n')
    with pytest.raises(ConfigError, match=rf"{path}: \[topology\].*connected"):
        resolve(load(path), ["a"] * 4, ["a"] * 4, str(path))


def test_graph_file_with_wrong_node_count_is_refused(tmp_path):
    edges = tmp_path / "three.edgelist"
    edges.write_text("0 1\n1 2\n")
    path = write(tmp_path, f'nodes = 5\n[topology]\nkind = "file"\npath = "{edges}"\n')
    with pytest.raises(ConfigError, match="topology"):
        resolve(load(path), ["a"] * 5, ["a"] * 5, str(path))


def test_overrides_change_one_run(tmp_path):
    path = write(tmp_path, "nodes = 3\n")
    config = load(path, ["topology.kind=ring", "nodes=6", "train.lr=0.5", "name=other",
                         "data.download=false"])
    assert (config.topology.kind, config.nodes, config.train.lr, config.name) == (
        "ring", 6, 0.5, "other")
    assert config.data.download is False


@pytest.mark.parametrize("item, needle", [
    ("nodes", "KEY=VALUE"), ("nodes=0", "nodes"), ("train.nope=1", "train.nope"),
])
def test_bad_overrides_are_named(tmp_path, item, needle):
    with pytest.raises(ConfigError, match=needle):
        load(write(tmp_path, ""), [item])


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load(write(tmp_path, "nodes = = 3"))


def test_digest_follows_the_values():
    assert from_dict({}).digest() == from_dict({}).digest()
    assert from_dict({}).digest() != from_dict({"rounds": 4}).digest()


def test_paths_in_a_config_are_relative_to_the_config_file(tmp_path):
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "pair.edgelist").write_text("0 1\n")
    path = write(tmp_path, '''nodes = 2
[topology]
kind = "file"
path = "graphs/pair.edgelist"
[data]
dir = "datasets"
''')
    config = load(path)
    assert config.topology.path == str(tmp_path / "graphs" / "pair.edgelist")
    assert config.data.dir == str(tmp_path / "datasets")


def test_model_groups_give_some_nodes_other_architectures(tmp_path):
    config = load(write(tmp_path, """nodes = 4
[model]
teacher = "cnn"
teacher_channels = [8, 16]
[[model.groups]]
nodes = [1, 3]
teacher_channels = [4, 8]
"""))
    assert config.model.for_node(0).teacher_channels == [8, 16]
    assert config.model.for_node(3).teacher_channels == [4, 8]
    assert config.model.for_node(3).teacher == "cnn"


@pytest.mark.parametrize("groups, key", [
    ("[[model.groups]]\nnodes = [7]", r"model.groups\[0\].nodes"),
    ("[[model.groups]]\nnodes = [0]\n[[model.groups]]\nnodes = [0, 1]",
     r"model.groups\[1\].nodes"),
    ("[[model.groups]]\nnodes = [0]\nteacher = 'vgg'", r"model.groups\[0\].teacher"),
    ("[[model.groups]]\nnodes = [0]\ncolour = 'red'", r"model.groups\[0\].colour"),
])
def test_bad_model_groups_are_named(tmp_path, groups, key):
    with pytest.raises(ConfigError, match=key):
        load(write(tmp_path, f"nodes = 3\n{groups}\n"))


def test_algorithm_tables_default_to_the_papers_values(tmp_path):
    config = load(write(tmp_path, "[fedhp]\nprototype_lr = 0.01\n[fedproto]\nweight = 0.5\n"))
    assert (config.methods["fedhp"].prototype_lr, config.methods["fedhp"].weight,
            config.methods["fedhp"].weight_decay) == (
        0.01, 0.1, 1e-4)
    assert config.methods["fedproto"].weight == 0.5
    assert from_dict({}).methods["fedproto"].weight is None
    assert (config.methods["fedproc"].projection_dim, config.methods["fedproc"].temperature) == (256, 1.0)
    assert config.methods["fedpr"].weight == 1.0


def test_profe_weights_in_the_old_train_table_are_pointed_to_their_new_place(tmp_path):
    path = write(tmp_path, "[train]\nalpha_s = 0.5\n")
    with pytest.raises(ConfigError, match=rf"{path}: train.alpha_s is now profe.alpha_s"):
        load(path)


def test_a_preset_fills_only_what_the_file_leaves_unset(tmp_path):
    config = load(write(tmp_path, '[profe]\npreset = "reference"\nbeta_s = 0.5\n'
                                  '[train]\nlr = 0.002\n'))
    profe = config.methods["profe"]
    assert (profe.beta_s, profe.beta_t, profe.prototype_loss) == (0.5, 0.05, "softmax")
    assert (config.train.optimizer, config.train.lr, config.train.amsgrad) == ("adam", 0.002, True)
    assert config.train.adam_betas == [0.851436, 0.999689]
    plain = load(write(tmp_path, "[profe]\nalpha_s = 0.5\n"))
    assert (plain.train.optimizer, plain.methods["profe"].order) == ("sgd", "teacher_first")


@pytest.mark.parametrize("text, key", [
    ("[fedpr]\nweight = -1", "fedpr.weight"),
    ("[fedhp]\nprototype_lr = 0", "fedhp.prototype_lr"),
    ("[fedproc]\nprojection_dim = 0", "fedproc.projection_dim"),
    ("[fedproc]\ntemperature = 0", "fedproc.temperature"),
])
def test_bad_algorithm_settings_are_named(tmp_path, text, key):
    with pytest.raises(ConfigError, match=key):
        load(write(tmp_path, text))


@pytest.mark.parametrize("item, message", [
    ("nodez=3", r"--set nodez=3|--set nodez: unknown key 'nodez'"),
    ("train.lrr=0.1", r"--set train.lrr: unknown key 'lrr' \(known keys in \[train\]"),
    ("fedhp.wieght=1", r"--set fedhp.wieght: unknown key 'wieght' \(known keys in \[fedhp\]"),
    ("nodes.count=3", r"--set nodes.count: 'nodes' is a value, not a table"),
    # a bad value, not only an unknown key
    ("nodes=0", r"^--set nodes=0: nodes must be in 1\.\.10,000 \(each node .*\), got 0$"),
    ("rounds=abc", r"^--set rounds=abc: rounds must be an integer, got 'abc'$"),
    ("algorithm=foo", r"^--set algorithm=foo: algorithm must be one of .*got 'foo'$"),
    ("profe.order=up", r"^--set profe.order=up: profe.order must be one of"),
])
def test_a_bad_set_key_or_value_is_blamed_on_the_option_not_the_file(tmp_path, item, message):
    path = write(tmp_path, "nodes = 3\n")
    with pytest.raises(ConfigError, match=message) as caught:
        load(path, [item])
    assert str(path) not in str(caught.value)


def test_a_bad_file_value_beside_a_good_set_value_still_names_the_file(tmp_path):
    path = write(tmp_path, "rounds = 0\n")
    with pytest.raises(ConfigError, match=rf"^{path}: rounds must be in 1..10,000"):
        load(path, ["nodes=3"])


@pytest.mark.parametrize("item", ["rounds=1", "train.epochs=1", "nodes=3"])
def test_an_unknown_table_in_the_file_is_the_files_error_whatever_is_set(tmp_path, item):
    # the list of known keys names `rounds`, `train` and `nodes`: no reason to blame them
    path = write(tmp_path, "[trian]\nepochs = 1\n")
    with pytest.raises(ConfigError, match=rf"^{path}: unknown key trian"):
        load(path, [item])


def test_an_unknown_top_level_key_lists_the_keys_a_file_may_use(tmp_path):
    path = write(tmp_path, "nodse = 3\n")
    with pytest.raises(ConfigError) as caught:
        load(path)
    known = str(caught.value).partition("known keys in top level: ")[2]
    assert "[fedhp]" in known and "[profe]" in known and "nodes" in known
    assert "methods" not in known


def test_a_model_name_without_a_colon_hints_at_the_factory_form(tmp_path):
    path = write(tmp_path, '[model]\nteacher = "mynet"\n')
    with pytest.raises(ConfigError, match=r'model.teacher must be one of .*"package.module:function"'):
        load(path)


def test_set_reaches_every_table_including_an_algorithms_own(tmp_path):
    config = load(write(tmp_path, ""), ["fedhp.weight=0.5", "model.teacher_channels=[4, 8]"])
    assert config.methods["fedhp"].weight == 0.5 and config.model.teacher_channels == [4, 8]


def test_a_path_given_with_set_is_relative_to_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "pair.edgelist").write_text("0 1\n")
    elsewhere = tmp_path / "configs"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    config = load(write(elsewhere, "nodes = 2\n"),
                  ["topology.kind=file", "topology.path=graphs/pair.edgelist"])
    assert config.topology.path == str(tmp_path / "graphs" / "pair.edgelist")


@pytest.mark.parametrize(("settings", "said"), [
    # the check once built a set per round: 23.6 GB for 100,000,000 rounds
    (["rounds=100000000"], ("--set rounds=100000000: rounds must be in 1..10,000 (each "
                            "round is kept in every node's record and schedule), got "
                            "100,000,000")),
    (["nodes=100000", "deploy.backend=\"sim\""], ("--set nodes=100000: nodes must be in "
                                                  "1..10,000 (each node is a process or "
                                                  "thread with its own record and data), "
                                                  "got 100,000")),
    # building this graph once took 84 s and 6 GB before a MemoryError
    (["nodes=5000"], ("--set nodes=5000: topology.kind fully_connected on 5,000 nodes has "
                      "24,995,000 directed edges, more than 1,000,000 (the launcher builds "
                      "every edge into federation.json before anything starts): use fewer "
                      "nodes or a sparser graph")),
    (["nodes=3000", "topology.kind=\"epidemic\""], ("--set nodes=3000: topology.kind "
                                                    "epidemic on 3,000 nodes has 8,997,000 "
                                                    "directed edges, more than 1,000,000")),
])
def test_a_setting_that_would_exhaust_the_machine_is_refused_in_one_line_building_nothing(
        tmp_path, settings, said):
    import subprocess
    import sys
    # the peak of this process's own memory (VmHWM; ru_maxrss would carry pytest's across
    # the fork)
    measure = ("import sys; from deploy.cli import main; code = main(sys.argv[1:]); "
               "print(next(line.split()[1] for line in open('/proc/self/status') "
               "if line.startswith('VmHWM'))); sys.exit(code)")
    done = subprocess.run([sys.executable, "-c", measure, "up", "-c",
                           str(REPO / "examples" / "quick.toml"),
                           *[part for s in settings for part in ("--set", s)]],
                          capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"protofed: {said}"), lines
    assert int(done.stdout) < 200 * 1024  # KiB: the process, torch imported, nothing built


def test_edge_counts_are_those_the_builders_make():
    from topology.graphs import build, edge_count
    for kind, n, k in [("fully_connected", 7, 2), ("ring", 7, 2), ("ring", 2, 2),
                       ("line", 7, 2), ("star", 7, 2), ("k_regular", 8, 3),
                       ("small_world", 9, 4), ("epidemic", 5, 2)]:
        assert edge_count(kind, n, k=k) == build(kind, n, k=k).number_of_edges(), kind
    assert edge_count("random", 100, p=0.1) == 990  # its expectation
    assert edge_count("file", 10) is None


def test_the_scenario_check_costs_what_its_events_do_not_the_round_count():
    from node.config import MAX_ROUNDS
    config = from_dict({"nodes": 3, "rounds": MAX_ROUNDS,
                        "scenario": {"events": [{"round": 2, "leave": [1]}]}})
    assert config.rounds == MAX_ROUNDS
    with pytest.raises(ConfigError, match=r"the round must be in 1\.\.10000"):
        from_dict({"nodes": 3, "rounds": MAX_ROUNDS,
                   "scenario": {"events": [{"round": MAX_ROUNDS + 1, "leave": [1]}]}})
