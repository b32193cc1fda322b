#!/usr/bin/env python3
"""Structure checks for deploy/ (Grafana dashboards, Prometheus rules, targets files),
run by ctest (tests/deploy/CMakeLists.txt). Python 3 standard library only.

  check_deploy.py dashboards      panel ids, types, gridPos, datasource variable, job and
                                  instance templating, metric and label names
  check_deploy.py rules           rule expressions use only contract metrics and labels;
                                  every alert has severity, summary and description, and a
                                  promtool test where it fires and one where it stays silent
  check_deploy.py targets FILE..  file_sd targets files are well formed
  check_deploy.py slurm           slurm/prolog.sh registers the port, kind and nodes a job's
                                  comment asks for, never fails the job; slurm/epilog.sh
                                  removes it; slurmctld_hook.sh works with an empty environment
  check_deploy.py panel-queries --promtool PATH
                                  panel_queries.py output is complete and every expression
                                  parses (promtool check rules on a generated rule file)
  check_deploy.py selftest        the checks above catch a renamed metric, a wrong label
                                  value, a missing job matcher and a duplicate panel id

The metric contract is deploy/metrics.txt. Exit status 1 and one line per problem on failure.
"""
import argparse
import copy
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEPLOY = os.path.join(REPO, "deploy")
DASHBOARDS = ["olmo2-training.json", "olmo2-serving.json"]
RULE_FILES = ["rules/recording.yml", "rules/alerts.yml"]

# --------------------------------------------------------------------------- contract

class Contract:
    def __init__(self, path):
        self.types = {}      # name -> gauge | counter | histogram
        self.labels = {}     # name -> {label: set(values) or None}
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.split("#", 1)[0].strip()
                if not line:
                    continue
                parts = line.split()
                if len(parts) != 3 or parts[1] not in ("gauge", "counter", "histogram"):
                    raise SystemExit(f"{path}:{n}: expected 'name type labels', got {line!r}")
                name, kind, labels = parts
                if kind == "counter" and not name.endswith("_total"):
                    raise SystemExit(f"{path}:{n}: counter {name} must end in _total")
                self.types[name] = kind
                self.labels[name] = {}
                if labels != "-":
                    for item in labels.split(","):
                        label, _, values = item.partition("=")
                        self.labels[name][label] = set(values.split("|")) if values else None
        self.all_labels = {"job", "instance", "le"}
        for labels in self.labels.values():
            self.all_labels |= set(labels)

    def series(self, metric):
        """(base name, {label: values}) for an exposed series name, or None."""
        if metric in self.types and self.types[metric] != "histogram":
            return metric, dict(self.labels[metric])
        for suffix in ("_bucket", "_sum", "_count"):
            base = metric[: -len(suffix)]
            if metric.endswith(suffix) and self.types.get(base) == "histogram":
                labels = dict(self.labels[base])
                if suffix == "_bucket":
                    labels["le"] = None
                return base, labels
        return None


# --------------------------------------------------------------------------- PromQL scan

FUNCTIONS = set("""
abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes clamp
clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month
deg delta deriv exp floor histogram_count histogram_fraction histogram_quantile histogram_sum
holt_winters hour idelta increase irate label_join label_replace last_over_time ln log10 log2
max_over_time min_over_time minute month pi predict_linear present_over_time
quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_desc sqrt
stddev_over_time stdvar_over_time sum_over_time tan tanh time timestamp vector year
""".split())
AGGREGATIONS = set("sum avg min max count stddev stdvar topk bottomk quantile count_values group".split())
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}

TOKEN = re.compile(r"""
   (?P<ws>\s+)
 | (?P<comment>\#[^\n]*)
 | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
 | (?P<range>\[[^\]]*\])
 | (?P<number>(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?:ms|s|m|h|d|w|y)*)
 | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
 | (?P<op>=~|!~|!=|==|>=|<=|[-+*/%^<>=(){},@])
""", re.X)


def tokenize(expr):
    pos, out = 0, []
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise ValueError(f"cannot read {expr[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup not in ("ws", "comment"):
            out.append((m.lastgroup, m.group()))
    return out


def unquote(s):
    if s[0] == "`":
        return s[1:-1]
    return json.loads('"' + s[1:-1].replace("\\'", "'") + '"') if s[0] in "'\"" else s


def scan(expr):
    """-> (selectors [(metric, braces?, [(label, op, value)])], grouping labels, errors)."""
    try:
        toks = tokenize(expr)
    except ValueError as e:
        return [], [], [str(e)]
    selectors, grouping, errors = [], [], []
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else None
        if kind == "ident":
            if text.lower() in GROUPING:
                if nxt == "(":
                    j = i + 2
                    while j < len(toks) and toks[j][1] != ")":
                        if toks[j][0] == "ident":
                            grouping.append(toks[j][1])
                        j += 1
                    i = j + 1
                else:
                    i += 1
                continue
            if text.lower() in KEYWORDS:
                i += 1
                continue
            if text in AGGREGATIONS and (nxt or "").lower() in ("by", "without"):
                i += 1                      # sum by (...) (...)
                continue
            if nxt == "(":
                if text not in FUNCTIONS and text not in AGGREGATIONS:
                    errors.append(f"unknown function {text}()")
                i += 1
                continue
            matchers, braces = [], nxt == "{"
            i += 1
            if braces:
                j = i + 1
                while j < len(toks) and toks[j][1] != "}":
                    if j + 2 >= len(toks) or toks[j][0] != "ident" or toks[j + 2][0] != "string":
                        errors.append(f"cannot read the matchers of {text}")
                        break
                    matchers.append((toks[j][1], toks[j + 1][1], unquote(toks[j + 2][1])))
                    j += 3
                    if j < len(toks) and toks[j][1] == ",":
                        j += 1
                i = j + 1
            selectors.append((text, braces, matchers))
            continue
        if text == "{":
            errors.append("a selector without a metric name")
        i += 1
    return selectors, grouping, errors


def check_expr(expr, contract, extra_metrics=(), templated=False, legend=None):
    """Problems with one expression: unknown metrics, functions, labels or label values;
    with templated=True every selector must carry job="$job" and instance=~"$instance"."""
    problems = []
    selectors, grouping, errors = scan(expr)
    problems += errors
    if not selectors:
        problems.append("no metric in the expression")
    available = {"job", "instance"}
    for metric, braces, matchers in selectors:
        found = contract.series(metric)
        if found is None and metric in extra_metrics:
            found = (metric, {label: None for label in contract.all_labels})
        if found is None:
            problems.append(f"metric {metric} is not in deploy/metrics.txt")
            continue
        _, labels = found
        available |= set(labels)
        allowed = set(labels) | {"job", "instance"}
        for label, op, value in matchers:
            if label not in allowed:
                problems.append(f"{metric} has no label {label}")
            elif op in ("=", "!=") and labels.get(label) and value not in labels[label]:
                problems.append(f"{metric}{{{label}}} takes {sorted(labels[label])}, not {value!r}")
        if templated:
            if ("job", "=", "$job") not in matchers:
                problems.append(f'{metric} lacks job="$job"')
            if ("instance", "=~", "$instance") not in matchers:
                problems.append(f'{metric} lacks instance=~"$instance"')
    for label in grouping:
        if label not in available:
            problems.append(f"grouping by {label}, a label none of its metrics has")
    for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend or ""):
        if label not in available:
            problems.append(f"legend uses {{{{{label}}}}}, a label none of its metrics has")
    return problems


# --------------------------------------------------------------------------- dashboards

PANEL_TYPES = {"row", "timeseries", "stat", "gauge", "bargauge", "heatmap", "table", "text",
               "barchart", "piechart", "histogram", "state-timeline", "status-history"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def check_dashboard(d, contract, name):
    problems = []
    def bad(msg):
        problems.append(f"{name}: {msg}")

    for key, kind in [("uid", str), ("title", str), ("panels", list), ("schemaVersion", int),
                      ("templating", dict), ("annotations", dict)]:
        if not isinstance(d.get(key), kind):
            bad(f"top-level {key} missing or not a {kind.__name__}")
    if problems:
        return problems
    if not 36 <= d["schemaVersion"] <= 45:
        bad(f"schemaVersion {d['schemaVersion']} is not a current one (36..45)")
    if d.get("id") is not None:
        bad("id must be null so that an import creates the dashboard")

    variables = {v.get("name"): v for v in d["templating"].get("list", [])}
    ds = [v for v in variables.values() if v.get("type") == "datasource"]
    if len(ds) != 1 or ds[0].get("name") != "datasource" or ds[0].get("query") != "prometheus":
        bad("needs exactly one datasource variable 'datasource' of type prometheus")
    for var in ("job", "instance"):
        v = variables.get(var)
        if not v or v.get("type") != "query":
            bad(f"needs a query variable {var}")
            continue
        if v.get("datasource") != DATASOURCE:
            bad(f"variable {var} must use the datasource variable")
        query = v.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", query or "")
        if not m or m.group(2) != var:
            bad(f"variable {var}: expected label_values(..., {var}), got {query!r}")
        else:
            for p in check_expr(m.group(1), contract):
                bad(f"variable {var}: {p}")
    if variables.get("instance") and "$job" not in json.dumps(variables["instance"].get("query")):
        bad("the instance variable must depend on $job")

    # Panels.
    ids, rects = {}, []
    for p in walk_panels(d["panels"]):
        title = p.get("title", "?")
        pid = p.get("id")
        if not isinstance(pid, int) or isinstance(pid, bool):
            bad(f"panel {title!r}: id missing or not an integer")
        elif pid in ids:
            bad(f"panel id {pid} used by {ids[pid]!r} and {title!r}")
        else:
            ids[pid] = title
        if p.get("type") not in PANEL_TYPES:
            bad(f"panel {title!r}: type {p.get('type')!r} is not a known panel type")
        if not p.get("title"):
            bad(f"panel {pid}: no title")
        g = p.get("gridPos")
        if not isinstance(g, dict) or any(not isinstance(g.get(k), int) for k in "hwxy"):
            bad(f"panel {title!r}: gridPos needs integer h, w, x, y")
        elif g["w"] < 1 or g["h"] < 1 or g["x"] < 0 or g["y"] < 0 or g["x"] + g["w"] > 24:
            bad(f"panel {title!r}: gridPos {g} outside the 24-column grid")
        else:
            for other, og in rects:
                if (g["x"] < og["x"] + og["w"] and og["x"] < g["x"] + g["w"]
                        and g["y"] < og["y"] + og["h"] and og["y"] < g["y"] + g["h"]):
                    bad(f"panel {title!r} overlaps {other!r}")
            rects.append((title, g))
        if p.get("type") in ("row", "text"):
            continue
        if p.get("datasource") != DATASOURCE:
            bad(f"panel {title!r}: datasource must be {DATASOURCE}")
        targets = p.get("targets")
        if not targets:
            bad(f"panel {title!r}: no targets")
            continue
        refs = [t.get("refId") for t in targets]
        if len(set(refs)) != len(refs) or not all(refs):
            bad(f"panel {title!r}: refIds {refs} must be set and unique")
        for t in targets:
            if t.get("datasource", DATASOURCE) != DATASOURCE:
                bad(f"panel {title!r} {t.get('refId')}: target datasource must be {DATASOURCE}")
            if not t.get("expr"):
                bad(f"panel {title!r} {t.get('refId')}: empty expr")
                continue
            for prob in check_expr(t["expr"], contract, templated=True, legend=t.get("legendFormat")):
                bad(f"panel {title!r} {t.get('refId')}: {prob}")

    for a in d["annotations"].get("list", []):
        if a.get("builtIn"):
            continue
        if a.get("datasource") != DATASOURCE:
            bad(f"annotation {a.get('name')!r}: datasource must be {DATASOURCE}")
        expr = a.get("expr") or a.get("target", {}).get("expr")
        if not expr:
            bad(f"annotation {a.get('name')!r}: no expr")
            continue
        for prob in check_expr(expr, contract, templated=True):
            bad(f"annotation {a.get('name')!r}: {prob}")
    return problems


def cmd_dashboards(args, contract):
    problems, uids = [], {}
    for name in DASHBOARDS:
        path = os.path.join(DEPLOY, "grafana", name)
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            problems.append(f"{name}: {e}")
            continue
        problems += check_dashboard(d, contract, name)
        if d.get("uid") in uids:
            problems.append(f"{name}: uid {d.get('uid')} also used by {uids[d.get('uid')]}")
        uids[d.get("uid")] = name
    return problems


# --------------------------------------------------------------------------- rules

def yaml_field(lines, key):
    """Value of `key:` in a rule block (plain, quoted or a | / > block scalar)."""
    for n, line in enumerate(lines):
        m = re.match(r"^(\s*)" + key + r":\s*(.*)$", line)
        if not m:
            continue
        indent, value = len(m.group(1)), m.group(2).strip()
        if value[:1] in ("|", ">"):
            body = []
            for more in lines[n + 1:]:
                if more.strip() and len(more) - len(more.lstrip()) <= indent:
                    break
                body.append(more.strip())
            return "\n".join(body).strip()
        if value[:1] in ("'", '"'):
            return value[1:-1]
        return value
    return None


def yaml_children(lines, key):
    """Keys under `key:` in a rule block."""
    for n, line in enumerate(lines):
        m = re.match(r"^(\s*)" + key + r":\s*$", line)
        if not m:
            continue
        indent, children = len(m.group(1)), {}
        for more in lines[n + 1:]:
            if more.strip() and len(more) - len(more.lstrip()) <= indent:
                break
            c = re.match(r"^\s*(\w+):\s*(.*)$", more)
            if c and len(more) - len(more.lstrip()) == indent + 2:
                children[c.group(1)] = c.group(2).strip().strip("'\"")
        return children
    return {}


def rule_blocks(path):
    blocks, cur = [], None
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            m = re.match(r"^(\s*)- (alert|record):\s*(\S+)\s*$", line)
            if m:
                cur = {"kind": m.group(2), "name": m.group(3), "indent": len(m.group(1)), "lines": []}
                blocks.append(cur)
            elif cur is not None:
                if line.strip() and not line.lstrip().startswith("#") and \
                        len(line) - len(line.lstrip()) <= cur["indent"]:
                    cur = None
                else:
                    cur["lines"].append(line)
    return blocks


def alert_tests(paths):
    """alertname -> set of 'fires' / 'silent' over the promtool test files."""
    seen = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        for n, line in enumerate(lines):
            m = re.match(r"^\s*alertname:\s*(\S+)\s*$", line)
            if not m:
                continue
            for more in lines[n + 1:n + 4]:
                e = re.match(r"^\s*exp_alerts:\s*(.*)$", more)
                if e:
                    seen.setdefault(m.group(1), set()).add("silent" if e.group(1).strip() == "[]" else "fires")
                    break
    return seen


def cmd_rules(args, contract):
    problems, recorded, alerts = [], set(), []
    blocks = []
    for rel in RULE_FILES:
        path = os.path.join(DEPLOY, "prometheus", rel)
        for b in rule_blocks(path):
            b["file"] = rel
            blocks.append(b)
            if b["kind"] == "record":
                recorded.add(b["name"])
    for b in blocks:
        where = f"{b['file']}: {b['kind']} {b['name']}"
        expr = yaml_field(b["lines"], "expr")
        if not expr:
            problems.append(f"{where}: no expr")
            continue
        for prob in check_expr(expr, contract, extra_metrics=recorded | {"up"}):
            problems.append(f"{where}: {prob}")
        if b["kind"] == "record":
            if not re.fullmatch(r"[a-z_]+:olmo2_[a-z0-9_]+:[a-z0-9_]+", b["name"]):
                problems.append(f"{where}: name should be level:olmo2_metric:operations")
            continue
        alerts.append(b["name"])
        labels = yaml_children(b["lines"], "labels")
        annotations = yaml_children(b["lines"], "annotations")
        if labels.get("severity") not in ("critical", "warning", "info"):
            problems.append(f"{where}: needs a severity label (critical, warning or info)")
        for key in ("summary", "description"):
            if key not in annotations:
                problems.append(f"{where}: needs a {key} annotation")
    tests_dir = os.path.join(DEPLOY, "prometheus", "tests")
    tests = sorted(os.path.join(tests_dir, f) for f in os.listdir(tests_dir) if f.endswith(".yml"))
    seen = alert_tests(tests)
    for name in alerts:
        for case in ("fires", "silent"):
            if case not in seen.get(name, ()):
                problems.append(f"alert {name}: no promtool test where it {case}")
    for name in seen:
        if name not in alerts:
            problems.append(f"promtool tests name an alert {name} that alerts.yml lacks")
    if len(alerts) < 8:
        problems.append(f"only {len(alerts)} alerts found in rules/alerts.yml")
    return problems


# --------------------------------------------------------------------------- targets

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def check_targets(path):
    problems = []
    try:
        with open(path, encoding="utf-8") as f:
            groups = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{path}: {e}"]
    if not isinstance(groups, list) or not groups:
        return [f"{path}: a file_sd file is a non-empty JSON list of target groups"]
    for n, g in enumerate(groups):
        if not isinstance(g, dict) or set(g) - {"targets", "labels"}:
            problems.append(f"{path}: group {n}: only 'targets' and 'labels' are allowed")
            continue
        targets = g.get("targets")
        if not isinstance(targets, list) or not targets or \
                not all(isinstance(t, str) and re.fullmatch(r"[^\s:/]+:\d{1,5}", t) for t in targets):
            problems.append(f"{path}: group {n}: targets must be a non-empty list of host:port")
        for k, v in (g.get("labels") or {}).items():
            if not LABEL_NAME.fullmatch(k) or k.startswith("__") or not isinstance(v, str):
                problems.append(f"{path}: group {n}: bad label {k!r}: {v!r}")
    return problems


def cmd_targets(args, contract):
    paths = args.files or [os.path.join(DEPLOY, "prometheus", "targets.example.json")]
    return [p for path in paths for p in check_targets(path)]


def cmd_slurm(args, contract):
    """prolog.sh registers what each job's comment asks for (port, kind, per-node), leaves
    jobs without one alone and never fails; epilog.sh removes the job's file; and
    slurmctld_hook.sh, run with the empty environment slurmctld gives it, finds its
    settings file beside its (linked) path, respects an inherited SLURM_CONF and execs the
    script SLURM_SCRIPT_CONTEXT names."""
    problems = []
    slurm = os.path.join(DEPLOY, "prometheus", "slurm")
    with tempfile.TemporaryDirectory() as tmp:
        targets = os.path.join(tmp, "targets")
        os.mkdir(targets)

        def run(script, **env):
            full = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "OLMO2_"))}
            full.update(env, OLMO2_PROMETHEUS_TARGETS=targets)
            r = subprocess.run([os.path.join(slurm, script)], env=full, capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"{script} {env}: exit status {r.returncode} (a failing prolog holds the job)")
            return r

        def files():
            return sorted(os.listdir(targets))

        def content(name):
            with open(os.path.join(targets, name), encoding="utf-8") as f:
                return json.load(f)

        run("prolog.sh", SLURM_JOB_ID="101", SLURM_JOB_NAME='olmo2-7b "stage 1"', SLURM_JOB_USER="alice",
            SLURM_JOB_NODELIST="node7,node8", SLURM_JOB_COMMENT="stage 1 olmo2-metrics=port:9411")
        run("prolog.sh", SLURM_JOB_ID="102", SLURM_JOB_NAME="chat", SLURM_JOB_NODELIST="node1,node2",
            SLURM_JOB_COMMENT="olmo2-metrics=kind:serve,port:8123,per-node")
        run("prolog.sh", SLURM_JOB_ID="30107", SLURM_JOB_NAME="auto", SLURM_JOB_NODELIST="node9",
            SLURM_JOB_COMMENT="olmo2-metrics=kind:serve,port:auto")
        run("prolog.sh", SLURM_JOB_ID="103", SLURM_JOB_NAME="olmo2-no-comment", SLURM_JOB_NODELIST="node3",
            SLURM_JOB_COMMENT="")
        bad = {"104": "olmo2-metrics=port:http", "105": "olmo2-metrics=port:70000",
               "106": "olmo2-metrics=port:9400,kind:eval"}
        for job, comment in bad.items():
            r = run("prolog.sh", SLURM_JOB_ID=job, SLURM_JOB_NAME="olmo2", SLURM_JOB_NODELIST="node4",
                    SLURM_JOB_COMMENT=comment)
            if comment.split("=", 1)[1] not in r.stderr or f"job {job}" not in r.stderr:
                problems.append(f"prolog.sh with comment {comment!r}: expected a message naming the job and "
                                f"the comment, got {r.stderr!r}")
        if files() != ["olmo2-serve-102.json", "olmo2-serve-30107.json", "olmo2-train-101.json"]:
            problems.append(f"prolog.sh wrote {files()}, expected olmo2-serve-102.json, olmo2-serve-30107.json "
                            "and olmo2-train-101.json")
            return problems
        if content("olmo2-serve-30107.json")[0]["targets"] != ["node9:20107"]:
            problems.append(f"port:auto for job 30107: {content('olmo2-serve-30107.json')[0]['targets']}, "
                            "expected node9:20107 (20000 + 30107 mod 10000)")
        os.remove(os.path.join(targets, "olmo2-serve-30107.json"))
        for name in files():
            problems += check_targets(os.path.join(targets, name))
        train, serve = content("olmo2-train-101.json"), content("olmo2-serve-102.json")
        if train[0]["targets"] != ["node7:9411"]:
            problems.append(f"training job: targets {train[0]['targets']}, expected rank 0's node7:9411")
        if train[0]["labels"] != {"slurm_job_id": "101", "slurm_job_name": "olmo2-7b__stage_1_",
                                  "slurm_user": "alice"}:
            problems.append(f"training job: labels {train[0]['labels']}")
        if serve[0]["targets"] != ["node1:8123", "node2:8123"]:
            problems.append(f"per-node serving job: targets {serve[0]['targets']}")
        run("epilog.sh", SLURM_JOB_ID="101")
        run("epilog.sh", SLURM_JOB_ID="999")
        if files() != ["olmo2-serve-102.json"]:
            problems.append(f"after epilog.sh for job 101: {files()} left")

        # The batch scripts of deploy/slurm/: valid bash, a header saying what to edit, the
        # comment word the prolog reads, and the exit status line the docs and tests read.
        scripts = sorted(glob.glob(os.path.join(DEPLOY, "slurm", "*.sbatch")))
        if len(scripts) < 5:
            problems.append(f"deploy/slurm/ has {len(scripts)} batch scripts, expected 5")
        for path in scripts:
            name = os.path.basename(path)
            r = subprocess.run(["bash", "-n", path], capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"{name}: bash -n: {r.stderr.strip()}")
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for needed in ("# EDIT", "#SBATCH --job-name=", "#SBATCH --comment=olmo2-metrics=", "olmo2 exit status"):
                if needed not in text:
                    problems.append(f"{name}: no {needed!r}")

        # The hook under an empty environment, through a link named like slurm.conf's path.
        hook_targets = os.path.join(tmp, "hook-targets")
        link = os.path.join(tmp, "olmo2_hook.sh")
        os.symlink(os.path.join(slurm, "slurmctld_hook.sh"), link)
        with open(os.path.join(tmp, "olmo2_hook.conf"), "w", encoding="utf-8") as f:
            f.write(f"SLURM_CONF=/nonexistent/from-settings.conf\nOLMO2_PROMETHEUS_TARGETS={hook_targets}\n")
        job = {"SLURM_JOB_ID": "201", "SLURM_JOB_NAME": "x", "SLURM_JOB_NODELIST": "n1",
               "SLURM_JOB_COMMENT": "olmo2-metrics=port:9500"}
        for context in ("prolog_slurmctld", "epilog_slurmctld", "bogus"):
            r = subprocess.run(["/usr/bin/env", "-i", f"SLURM_SCRIPT_CONTEXT={context}",
                                *[f"{k}={v}" for k, v in job.items()], link], capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"slurmctld_hook.sh ({context}): exit status {r.returncode}: {r.stderr}")
            have = sorted(os.listdir(hook_targets)) if os.path.isdir(hook_targets) else []
            want = ["olmo2-train-201.json"] if context == "prolog_slurmctld" else []
            if have != want:
                problems.append(f"slurmctld_hook.sh ({context}) with an empty environment: {have}, expected {want}")
            if context == "bogus" and "SLURM_SCRIPT_CONTEXT" not in r.stderr:
                problems.append(f"slurmctld_hook.sh with a bad context said {r.stderr!r}")
        # SLURM_CONF reaches scontrol (a bracketed node list): the settings file's, unless
        # slurmctld passed one. An empty slurm.conf makes scontrol fail at once.
        empty, good = os.path.join(tmp, "empty.conf"), os.path.join(tmp, "good.conf")
        open(empty, "w").close()
        with open(good, "w", encoding="utf-8") as f:
            f.write("ClusterName=t\nSlurmctldHost=h\n")
        job.update(SLURM_JOB_NODELIST="n[1-2]", SLURM_JOB_COMMENT="olmo2-metrics=port:9500,per-node")
        for settings, inherited, want in ((good, None, ["n1:9500", "n2:9500"]), (empty, good, ["n1:9500", "n2:9500"]),
                                          (empty, None, None)):
            with open(os.path.join(tmp, "olmo2_hook.conf"), "w", encoding="utf-8") as f:
                f.write(f"SLURM_CONF={settings}\nOLMO2_PROMETHEUS_TARGETS={hook_targets}\n")
            env = ["SLURM_SCRIPT_CONTEXT=prolog_slurmctld", *[f"{k}={v}" for k, v in job.items()]]
            env += [f"SLURM_CONF={inherited}"] if inherited else []
            r = subprocess.run(["/usr/bin/env", "-i", *env, link], capture_output=True, text=True)
            path = os.path.join(hook_targets, "olmo2-train-201.json")
            got = json.load(open(path, encoding="utf-8"))[0]["targets"] if os.path.exists(path) else None
            if got != want or r.returncode != 0:
                problems.append(f"slurmctld_hook.sh with settings SLURM_CONF={settings}, inherited {inherited}: "
                                f"targets {got}, expected {want} (status {r.returncode}, {r.stderr.strip()!r})")
            if os.path.exists(path):
                os.remove(path)
    return problems


# --------------------------------------------------------------------------- panel queries

def cmd_panel_queries(args, contract):
    problems = []
    tool = os.path.join(DEPLOY, "grafana", "panel_queries.py")
    run = subprocess.run([sys.executable, tool, "--annotations"], capture_output=True, text=True)
    if run.returncode != 0:
        return [f"panel_queries.py failed: {run.stderr.strip()}"]
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    expected = 0
    for name in DASHBOARDS:
        with open(os.path.join(DEPLOY, "grafana", name), encoding="utf-8") as f:
            d = json.load(f)
        expected += sum(1 for p in walk_panels(d["panels"]) for t in p.get("targets", []) if t.get("expr"))
        expected += sum(1 for a in d["annotations"]["list"] if a.get("expr"))
    if len(lines) != expected:
        problems.append(f"panel_queries.py printed {len(lines)} expressions, the dashboards hold {expected}")
    for q in lines:
        if set(q) < {"dashboard", "panel", "expr"}:
            problems.append(f"panel_queries.py line lacks dashboard/panel/expr: {q}")
        elif re.search(r"\$(?!\d)|\[\[", q["expr"]):
            problems.append(f"{q['dashboard']}: {q['panel']}: variable left in {q['expr']!r}")
    if not args.promtool:
        return problems
    if not shutil.which(args.promtool):
        return problems + [f"promtool not found ({args.promtool}): install Debian's prometheus package "
                           "(scripts/setup.sh does) and re-run cmake"]
    with tempfile.TemporaryDirectory() as tmp:
        rules = os.path.join(tmp, "panel_queries.yml")
        with open(rules, "w", encoding="utf-8") as f:
            f.write("groups:\n  - name: panel-queries\n    rules:\n")
            for n, q in enumerate(lines):
                f.write(f"      - record: panel_query_{n}\n        expr: {json.dumps(q['expr'])}\n")
        run = subprocess.run([args.promtool, "check", "rules", rules], capture_output=True, text=True)
        if run.returncode != 0:
            problems.append("promtool cannot parse the panel queries:\n" + run.stdout + run.stderr)
    return problems


# --------------------------------------------------------------------------- selftest

def cmd_selftest(args, contract):
    """The dashboard checks must catch what they are there to catch."""
    with open(os.path.join(DEPLOY, "grafana", DASHBOARDS[0]), encoding="utf-8") as f:
        good = json.load(f)
    with open(os.path.join(DEPLOY, "grafana", DASHBOARDS[1]), encoding="utf-8") as f:
        serving = json.load(f)
    problems = []
    if check_dashboard(good, contract, "training"):
        problems.append("selftest: the training dashboard does not pass to begin with")

    def mutated(d, find, replace):
        text = json.dumps(d)
        if find not in text:
            raise SystemExit(f"selftest: {find!r} not in the dashboard")
        return json.loads(text.replace(find, replace, 1))

    cases = [
        ("renamed metric", mutated(good, "olmo2_train_grad_norm{", "olmo2_train_gradient_norm{"),
         "not in deploy/metrics.txt"),
        ("histogram without _bucket", mutated(good, "olmo2_train_step_seconds_bucket{", "olmo2_train_step_seconds{"),
         "not in deploy/metrics.txt"),
        ("wrong label value", mutated(serving, 'outcome=\\"error\\"', 'outcome=\\"errors\\"'), "takes"),
        ("unknown label", mutated(good, "sum by (rank, tp, pp, dp, le)", "sum by (node, le)"), "grouping by node"),
        ("missing job matcher", mutated(good, 'olmo2_train_z_loss{job=\\"$job\\",', "olmo2_train_z_loss{"),
         'lacks job="$job"'),
        ("legend label", mutated(good, "rank {{rank}}", "rank {{gpu}}"), "legend uses"),
        ("unknown function", mutated(good, "histogram_quantile(", "histogram_quantil("), "unknown function"),
        ("hard-coded datasource", mutated(good, '"uid": "${datasource}"}, "targets"', '"uid": "abc"}, "targets"'),
         "datasource must be"),
    ]
    dup = copy.deepcopy(good)
    dup["panels"][3]["id"] = dup["panels"][2]["id"]
    cases.append(("duplicate panel id", dup, "used by"))
    overlap = copy.deepcopy(good)
    overlap["panels"][3]["gridPos"] = dict(overlap["panels"][2]["gridPos"])
    cases.append(("overlapping panels", overlap, "overlaps"))
    nogrid = copy.deepcopy(good)
    del nogrid["panels"][4]["gridPos"]
    cases.append(("missing gridPos", nogrid, "gridPos"))
    for what, d, expect in cases:
        found = check_dashboard(d, contract, what)
        if not any(expect in p for p in found):
            problems.append(f"selftest: {what} not reported (expected {expect!r}; got {found})")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["dashboards", "rules", "targets", "slurm", "panel-queries", "selftest"])
    ap.add_argument("files", nargs="*", help="targets files (targets)")
    ap.add_argument("--promtool", help="promtool, to parse the panel queries (panel-queries)")
    args = ap.parse_args()
    contract = Contract(os.path.join(DEPLOY, "metrics.txt"))
    commands = {"dashboards": cmd_dashboards, "rules": cmd_rules, "targets": cmd_targets, "slurm": cmd_slurm,
                "panel-queries": cmd_panel_queries, "selftest": cmd_selftest}
    problems = commands[args.command](args, contract)
    for p in problems:
        print(f"FAIL {p}")
    if problems:
        return 1
    print(f"OK {args.command}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
