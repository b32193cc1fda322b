#!/usr/bin/env python3
"""Print every PromQL expression of the olmo2 Grafana dashboards, Grafana variables
substituted, one JSON object a line:

  {"dashboard": "olmo2-training", "panel": "Loss", "panel_id": 9, "ref_id": "A",
   "kind": "panel", "expr": "olmo2_train_loss{job=\"olmo2-train\",instance=~\".+\"}"}

so that a test can run each one against a real Prometheus server (every expression
must parse and, on a server that scraped a run, return data).

Substituted: $job and $instance (template variables; by default the job variable's
current value in the dashboard and the instance variable's "All" value),
$__rate_interval -> 1m, $__interval -> 15s, $__range -> 5m (and the _s/_ms forms);
$datasource only appears in datasource fields and is ignored. `$1`-style references
(label_replace replacements) are left as they are. An unknown variable is an error.
Values go into the expressions verbatim, inside PromQL strings: a regex backslash
in --instance is written \\\\ (Prometheus reads "\\." as an invalid escape).

Usage: panel_queries.py [--job JOB] [--instance REGEX] [--rate-interval D]
                        [--interval D] [--range D] [--annotations] [DASHBOARD.json ...]
With no files: olmo2-training.json and olmo2-serving.json next to this script.
--annotations also prints the dashboards' annotation queries (kind "annotation"),
which return data only around the events they mark. Standard library only.
"""
import argparse
import json
import os
import re
import signal
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DASHBOARDS = [os.path.join(HERE, "olmo2-training.json"),
                      os.path.join(HERE, "olmo2-serving.json")]

# $name, ${name}, ${name:format}, [[name]] — the forms Grafana interpolates.
VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)")

DURATION = re.compile(r"^(\d+)(ms|s|m|h|d)$")
SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds(duration):
    m = DURATION.match(duration)
    if not m:
        raise SystemExit(f"panel_queries.py: not a duration: {duration!r} (e.g. 1m, 15s)")
    return int(m.group(1)) * SECONDS[m.group(2)]


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def variable_defaults(dashboard):
    """job -> the job variable's current value; instance -> its 'All' value."""
    out = {}
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "datasource":
            continue
        current = v.get("current", {}).get("value")
        if isinstance(current, list):
            current = current[0] if current else None
        if current == "$__all" or (current is None and v.get("includeAll")):
            current = v.get("allValue") or ".*"
        if current is not None:
            out[v["name"]] = current
    return out


def substitute(expr, values, where):
    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name.isdigit():                      # label_replace's $1, not Grafana's
            return m.group(0)
        if name not in values:
            raise SystemExit(f"panel_queries.py: {where}: unknown variable ${name} in {expr!r}")
        return values[name]
    return VARIABLE.sub(repl, expr)


def queries(path, args):
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
    name = dashboard.get("uid") or os.path.splitext(os.path.basename(path))[0]
    values = variable_defaults(dashboard)
    if args.job is not None:
        values["job"] = args.job
    if args.instance is not None:
        values["instance"] = args.instance
    rate, interval, range_ = (seconds(args.rate_interval), seconds(args.interval), seconds(args.range))
    values.update({
        "__rate_interval": args.rate_interval, "__rate_interval_ms": str(int(rate * 1000)),
        "__interval": args.interval, "__interval_ms": str(int(interval * 1000)),
        "__range": args.range, "__range_s": str(int(range_)), "__range_ms": str(int(range_ * 1000)),
    })
    for panel in walk_panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            expr = target.get("expr")
            if not expr or target.get("hide"):
                continue
            where = f"{name}: panel {panel.get('id')} ({panel.get('title')!r})"
            yield {"dashboard": name, "panel": panel.get("title", ""), "panel_id": panel.get("id"),
                   "ref_id": target.get("refId", ""), "kind": "panel",
                   "expr": substitute(expr, values, where)}
    if args.annotations:
        for anno in dashboard.get("annotations", {}).get("list", []):
            expr = anno.get("expr") or anno.get("target", {}).get("expr")
            if not expr:
                continue
            where = f"{name}: annotation {anno.get('name')!r}"
            yield {"dashboard": name, "panel": anno.get("name", ""), "panel_id": None,
                   "ref_id": "Anno", "kind": "annotation", "expr": substitute(expr, values, where)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dashboards", nargs="*", default=DEFAULT_DASHBOARDS)
    ap.add_argument("--job", help="value for $job (default: the dashboard's current job)")
    ap.add_argument("--instance", help="value for $instance, a regex (default: the 'All' value)")
    ap.add_argument("--rate-interval", default="1m", help="value for $__rate_interval (1m)")
    ap.add_argument("--interval", default="15s", help="value for $__interval (15s)")
    ap.add_argument("--range", default="5m", help="value for $__range (5m)")
    ap.add_argument("--annotations", action="store_true", help="also print annotation queries")
    args = ap.parse_args(argv)
    if hasattr(signal, "SIGPIPE"):                # quiet under `| head`
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    for path in args.dashboards:
        for q in queries(path, args):
            print(json.dumps(q, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
