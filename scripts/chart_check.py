#!/usr/bin/env python3
"""Renders the Helm chart deploy/helm/compute-market offline and validates what it renders; run
by scripts/chart-check, which makes the venv this needs (helm-python-sdk, kubernetes-validate,
jsonschema, PyYAML).

For every values file deploy/helm/values/*.yaml, which must be accepted:
- the values (merged over the chart's defaults) against values.schema.json, by jsonschema
  (draft-07, every error with its path) and by Helm's own schema check;
- `helm lint --strict` at Kubernetes KUBE (Helm's Go SDK, in process: helm-python-sdk binds
  libhelm_c, a C ABI over Helm v4's SDK, through ctypes; no helm binary, no cluster);
- the render (release RELEASE in namespace NAMESPACE); NOTES.txt must render;
- each rendered object: Kubernetes kinds by kubernetes-validate in strict mode (unknown fields
  are errors) against Kubernetes KUBE; the CRD kinds (ServiceMonitor, ScaledObject, RayService)
  by jsonschema against deploy/crds/*.json; a kind with neither schema is an error;
- lint-level rules on each object (names, labels, images, resources, security) and the chart's
  own invariants (grace periods from the market's windows, one key per pod, selectors that
  select something, no Secret and no key material in the output).

Each deploy/helm/values/broken/*.yaml must be refused (by the schema, the templates or the
validation of what they render), and each deploy/helm/values/broken/rendered/*.yaml (a rendered
object of a good values file with a field set wrong) must be refused by its validator.

Prints one line per file (values file, objects rendered, ok / refused and why) and exits
non-zero, after a line per problem naming the file, the object and the field, when a good file
fails or a broken one is accepted."""

import argparse
import copy
import functools
import glob
import json
import math
import os
import re
import sys
import time

import helm_python as helm
import jsonschema
import kubernetes_validate.utils as kv
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHART = os.path.join(ROOT, "deploy/helm/compute-market")
VALUES = os.path.join(ROOT, "deploy/helm/values")
CRDS = os.path.join(ROOT, "deploy/crds")
KUBE = "1.31"
RELEASE, NAMESPACE = "cm", "compute-market"
SHELLS = {"sh", "bash", "ash", "dash", "zsh", "busybox"}
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# a Solana keypair file: a JSON array of 64 byte values
KEYPAIR_RE = re.compile(r"\[\s*\d{1,3}(\s*,\s*\d{1,3}){63}\s*\]")

# kubernetes-validate reads its schema files again for every object: read each once
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)


def rel(path):
    return os.path.relpath(path, ROOT)


class Refused(Exception):
    """A values file or object refused: `stage` says by what, `problems` are (where, what)."""

    def __init__(self, stage, problems, objects=None):
        super().__init__(stage)
        self.stage, self.problems, self.objects = stage, problems, objects

    def first(self):
        where, what = self.problems[0]
        return f"{self.stage}: {where}: {what}" if where else f"{self.stage}: {what}"


def path_str(parts):
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "(root)"


def obj_name(obj):
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind', '?')}/{meta.get('name', '?')}"


def load_yaml(path):
    with open(path) as f:
        data = yaml.safe_load(f)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SystemExit(f"{rel(path)}: not a YAML mapping")
    return data


def crd_schemas():
    """(apiVersion, kind) → (file, schema) of every deploy/crds/*.json."""
    out = {}
    for path in sorted(glob.glob(os.path.join(CRDS, "*.json"))):
        with open(path) as f:
            schema = json.load(f)
        props = schema["properties"]
        out[(props["apiVersion"]["const"], props["kind"]["const"])] = (rel(path), schema)
    return out


# ---------------------------------------------------------------------------------- values


def check_values(chart, schema, values):
    """The values over the chart's defaults against values.schema.json: jsonschema's errors
    (each with its path) and Helm's own schema check (the one `helm install` applies)."""
    merged = chart.merge_values(values)
    validator = jsonschema.Draft7Validator(schema)
    problems = [
        (path_str(e.absolute_path), e.message)
        for e in sorted(validator.iter_errors(merged), key=lambda e: list(map(str, e.absolute_path)))
    ]
    try:
        chart.validate_schema(values)
    except helm.HelmError as e:
        if not problems:  # the two disagree: report Helm's
            problems.append(("", "helm: " + " ".join(str(e).split())))
    if problems:
        raise Refused("values.schema.json", problems)
    return merged


def lint(values):
    report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBE}.0")
    problems = [(m["path"], " ".join(m["error"].split())) for m in report["messages"] if m["severity"] >= 2]
    if problems:
        raise Refused(f"helm lint --strict (Kubernetes {KUBE})", problems)


def render(chart, values):
    """The rendered objects, in template order, and NOTES.txt."""
    try:
        out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    except helm.HelmError as e:
        raise Refused("render", [("", " ".join(str(e).split()))])
    objects, notes = [], None
    for template in sorted(out):
        text = out[template]
        if template.endswith("NOTES.txt"):
            notes = text
            continue
        if not template.endswith((".yaml", ".yml")):
            continue
        for i, doc in enumerate(yaml.safe_load_all(text)):
            if doc:
                objects.append((f"{template.split('/', 1)[1]}#{i}", doc))
    if not notes or not notes.strip():
        raise Refused("render", [("templates/NOTES.txt", "renders empty")])
    return objects, notes, out


# ---------------------------------------------------------------------------------- objects


def validate_object(obj, crds):
    """(validator, problems) of one rendered object."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key in crds:
        file, schema = crds[key]
        validator = jsonschema.Draft7Validator(schema)
        errs = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
        return f"CRD schema {file}", [(path_str(e.absolute_path), e.message) for e in errs]
    stage = f"kubernetes-validate {KUBE} strict"
    try:
        kv.validate(obj, KUBE, strict=True)
    except kv.ValidationError as e:
        return stage, [(path_str(e.path), e.message)]
    except kv.SchemaNotFoundError as e:
        return stage, [("apiVersion", e.message + " (and no CRD schema under deploy/crds)")]
    return stage, []


def pod_specs(obj):
    """(path, pod spec) of every pod template in an object."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        yield "spec.template.spec", (spec.get("template") or {}).get("spec") or {}, (spec.get("template") or {})
    elif kind == "CronJob":
        t = spec["jobTemplate"]["spec"]["template"]
        yield "spec.jobTemplate.spec.template.spec", t.get("spec") or {}, t
    elif kind == "Pod":
        yield "spec", spec, obj
    elif kind == "RayService":
        rc = spec.get("rayClusterConfig") or {}
        head = (rc.get("headGroupSpec") or {}).get("template") or {}
        yield "spec.rayClusterConfig.headGroupSpec.template.spec", head.get("spec") or {}, head
        for i, w in enumerate(rc.get("workerGroupSpecs") or []):
            t = w.get("template") or {}
            yield f"spec.rayClusterConfig.workerGroupSpecs[{i}].template.spec", t.get("spec") or {}, t


def lint_object(obj, keeper_repo):
    """Lint-level problems of one object: (field, what)."""
    p = []
    meta = obj.get("metadata") or {}
    name = meta.get("name")
    if not name:
        p.append(("metadata.name", "missing"))
    else:
        if len(name) > 63:
            p.append(("metadata.name", f"{len(name)} characters, more than 63"))
        if not NAME_RE.match(name):
            p.append(("metadata.name", f"{name!r} is not a DNS label"))
    labels = meta.get("labels") or {}
    for label in ("app.kubernetes.io/name", "app.kubernetes.io/instance"):
        if not labels.get(label):
            p.append((f"metadata.labels.{label}", "missing"))
    if obj.get("kind") == "Secret":
        p.append(("kind", "the chart renders a Secret: keys come from Secrets the operator makes"))
    for path, spec, template in pod_specs(obj):
        tlabels = (template.get("metadata") or {}).get("labels") or {}
        for label in ("app.kubernetes.io/name", "app.kubernetes.io/instance"):
            if not tlabels.get(label):
                p.append((f"{path[:-5]}.metadata.labels.{label}", "missing"))
        psc = spec.get("securityContext") or {}
        if psc.get("runAsNonRoot") is not True:
            p.append((f"{path}.securityContext.runAsNonRoot", "not true"))
        if psc.get("runAsUser", 1) == 0:
            p.append((f"{path}.securityContext.runAsUser", "0 (root)"))
        if (psc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            p.append((f"{path}.securityContext.seccompProfile.type", "not RuntimeDefault"))
        if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
            p.append((path, "uses the host's namespaces"))
        groups = [("containers", spec.get("containers") or []), ("initContainers", spec.get("initContainers") or [])]
        for group, containers in groups:
            for i, c in enumerate(containers):
                cp = f"{path}.{group}[{i}]"
                image = c.get("image") or ""
                last = image.rsplit("/", 1)[-1]
                if "@sha256:" not in image and ":" not in last:
                    p.append((f"{cp}.image", f"{image!r} has no tag"))
                elif last.endswith(":latest"):
                    p.append((f"{cp}.image", f"{image!r}: the tag `latest`"))
                req = (c.get("resources") or {}).get("requests") or {}
                for r in ("cpu", "memory"):
                    if r not in req:
                        p.append((f"{cp}.resources.requests.{r}", "not set"))
                sc = c.get("securityContext") or {}
                if sc.get("readOnlyRootFilesystem") is not True:
                    p.append((f"{cp}.securityContext.readOnlyRootFilesystem", "not true"))
                if sc.get("allowPrivilegeEscalation") is not False:
                    p.append((f"{cp}.securityContext.allowPrivilegeEscalation", "not false"))
                if sc.get("privileged"):
                    p.append((f"{cp}.securityContext.privileged", "true"))
                if sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is not True:
                    p.append((f"{cp}.securityContext.runAsNonRoot", "not true"))
                if sc.get("runAsUser", psc.get("runAsUser", 1)) == 0:
                    p.append((f"{cp}.securityContext.runAsUser", "0 (root)"))
                if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
                    p.append((f"{cp}.securityContext.capabilities.drop", "does not drop ALL"))
                if (sc.get("capabilities") or {}).get("add"):
                    p.append((f"{cp}.securityContext.capabilities.add", "adds capabilities"))
                cmd = list(c.get("command") or []) + list(c.get("args") or [])
                if cmd and os.path.basename(str(cmd[0])) in SHELLS:
                    p.append((f"{cp}.command", f"runs a shell ({cmd[0]}): the keeper image has none"))
                if image.split("@")[0].rsplit(":", 1)[0] == keeper_repo and c.get("command") != ["/keeper"]:
                    p.append((f"{cp}.command", f"{c.get('command')!r}: the keeper image's entrypoint is [\"/keeper\"]"))
                if sc.get("readOnlyRootFilesystem") and not any(
                        m.get("mountPath") == "/tmp" for m in c.get("volumeMounts") or []):
                    p.append((f"{cp}.volumeMounts", "nothing writable at /tmp under a read-only root"))
    return p


def arg_after(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def chart_invariants(objects, merged):
    """What the chart promises, checked on what it rendered: (object, field, what)."""
    p = []
    w, slot = merged["market"]["windows"], merged["market"]["slotSeconds"]
    provider_grace = math.ceil((w["submit"] + 2 * (w["join"] + w["commit"] + w["reveal"]) + w["dispute"]) * slot) + 60
    verifier_grace = math.ceil((w["join"] + w["commit"] + w["reveal"]) * slot) + 60
    by_kind = {}
    for _, o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    pods = [(o, t) for o in objects for _, _, t in pod_specs(o[1])]

    def keeper(o):
        return o["spec"]["template"]["spec"]["containers"][0]

    prov = merged["providers"]
    sts = [o for o in by_kind.get("StatefulSet", []) if o["metadata"]["name"].endswith("-provider")]
    if prov["enabled"] != bool(sts):
        p.append(("StatefulSet/*-provider", "", f"providers.enabled is {prov['enabled']} but {len(sts)} rendered"))
    for o in sts:
        n, spec = obj_name(o), o["spec"]["template"]["spec"]
        c, name = keeper(o), o["metadata"]["name"]
        args = c["args"]
        if spec.get("terminationGracePeriodSeconds") != provider_grace:
            p.append((n, "spec.template.spec.terminationGracePeriodSeconds",
                      f"{spec.get('terminationGracePeriodSeconds')}, want {provider_grace}"))
        if arg_after(args, "--drain-timeout-s") != str(provider_grace - 30):
            p.append((n, "args --drain-timeout-s", f"{arg_after(args, '--drain-timeout-s')}, want {provider_grace - 30}"))
        if arg_after(args, "--keypair") != "/keys/$(POD_NAME)/keypair.json":
            p.append((n, "args --keypair", f"{arg_after(args, '--keypair')}"))
        if "$(POD_NAME)" not in (arg_after(args, "--public-url") or ""):
            p.append((n, "args --public-url", "not per pod ($(POD_NAME))"))
        env = {e["name"]: e for e in c.get("env") or []}
        if ((env.get("POD_NAME") or {}).get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") != "metadata.name":
            p.append((n, "containers[0].env.POD_NAME", "not the downward API's metadata.name"))
        ordinals = prov["autoscaling"]["maxReplicas"] if prov["autoscaling"]["enabled"] else prov["replicas"]
        keys = [v for v in spec["volumes"] if v["name"] == "keys"][0]["projected"]["sources"]
        paths = [s["secret"]["items"][0]["path"] for s in keys]
        if paths != [f"{name}-{i}/keypair.json" for i in range(ordinals)]:
            p.append((n, "volumes.keys.projected.sources", f"{paths}, want one per ordinal 0..{ordinals - 1}"))
        if not all(s["secret"].get("optional") is True for s in keys):
            p.append((n, "volumes.keys.projected.sources", "a Secret not optional"))
        gpus = prov["gpus"]
        limit = ((c.get("resources") or {}).get("limits") or {}).get("nvidia.com/gpu")
        if (limit or 0) != gpus:
            p.append((n, "containers[0].resources.limits.nvidia.com/gpu", f"{limit}, want {gpus}"))
        if ("--require-gpu" in args) != (gpus > 0):
            p.append((n, "args --require-gpu", f"present: {'--require-gpu' in args}, gpus: {gpus}"))
        for probe, path in (("livenessProbe", "/livez"), ("readinessProbe", "/readyz"), ("startupProbe", "/livez")):
            if ((c.get(probe) or {}).get("httpGet") or {}).get("path") != path:
                p.append((n, f"containers[0].{probe}", f"not an HTTP GET {path}"))
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        claims = [t["metadata"]["name"] for t in o["spec"].get("volumeClaimTemplates") or []]
        if mounts.get("/var/lib/compute-market") not in claims:
            p.append((n, "volumeMounts /var/lib/compute-market", "not a volumeClaimTemplate"))
        if prov["autoscaling"]["enabled"] == ("replicas" in o["spec"]):
            p.append((n, "spec.replicas", "set while autoscaled, or missing while not"))
    keys = merged["verifiers"]["keys"] if merged["verifiers"]["enabled"] else []
    deps = [o for o in by_kind.get("Deployment", []) if o["metadata"]["labels"].get("app.kubernetes.io/component") == "verifier"]
    got = sorted(o["metadata"]["labels"].get("compute-market.io/key") for o in deps)
    if got != sorted(keys):
        p.append(("Deployment/*-verifier-*", "", f"verifier Deployments for keys {got}, want one per key {sorted(keys)}"))
    for o in deps:
        n, spec = obj_name(o), o["spec"]
        if spec.get("replicas") != 1 or (spec.get("strategy") or {}).get("type") != "Recreate":
            p.append((n, "spec.replicas / spec.strategy", "a verifier key must run in exactly one pod: replicas 1, Recreate"))
        if spec["template"]["spec"].get("terminationGracePeriodSeconds") != verifier_grace:
            p.append((n, "spec.template.spec.terminationGracePeriodSeconds",
                      f"{spec['template']['spec'].get('terminationGracePeriodSeconds')}, want {verifier_grace}"))
        if arg_after(keeper(o)["args"], "--drain-timeout-s") != str(verifier_grace - 30):
            p.append((n, "args --drain-timeout-s", f"want {verifier_grace - 30}"))
    # selectors select something
    for o in by_kind.get("Service", []) + by_kind.get("PodDisruptionBudget", []):
        sel = o["spec"].get("selector") or {}
        sel = sel.get("matchLabels", sel) if o["kind"] == "PodDisruptionBudget" else sel
        if not any(sel.items() <= ((t.get("metadata") or {}).get("labels") or {}).items() for _, t in pods):
            p.append((obj_name(o), "spec.selector", f"{sel} selects no pod this chart renders"))
    for o in by_kind.get("ServiceMonitor", []):
        sel = o["spec"]["selector"].get("matchLabels") or {}
        if not any(sel.items() <= s["metadata"]["labels"].items() for s in by_kind.get("Service", [])):
            p.append((obj_name(o), "spec.selector.matchLabels", "selects no Service"))
    for o in by_kind.get("ScaledObject", []):
        ref = o["spec"]["scaleTargetRef"]
        if not any(t["kind"] == ref.get("kind") and t["metadata"]["name"] == ref["name"] for _, t in objects):
            p.append((obj_name(o), "spec.scaleTargetRef", f"{ref} is not rendered"))
    return p


def check_objects(objects, crds, merged, text):
    """Validation, lint and invariants of one render: raises Refused naming object and field."""
    problems, stages = [], set()
    for where, o in objects:
        stage, errs = validate_object(o, crds)
        for field, what in errs:
            problems.append((f"{obj_name(o)} ({where}): {field}", what))
            stages.add(stage)
    for where, o in objects:
        for field, what in lint_object(o, merged["image"]["repository"]):
            problems.append((f"{obj_name(o)} ({where}): {field}", what))
            stages.add("lint")
    if not problems:
        for n, field, what in chart_invariants(objects, merged):
            problems.append((f"{n}: {field}" if field else n, what))
            stages.add("chart invariants")
    names = [(o["kind"], o["metadata"].get("name")) for _, o in objects]
    for dup in sorted({x for x in names if names.count(x) > 1}):
        problems.append((f"{dup[0]}/{dup[1]}", "rendered twice"))
        stages.add("lint")
    if KEYPAIR_RE.search(text):
        problems.append(("(output)", "holds what looks like a keypair (64 byte values)"))
        stages.add("lint")
    if problems:
        raise Refused(" + ".join(sorted(stages)), problems, len(objects))


def process(chart, schema, crds, path):
    """Objects rendered from one values file; raises Refused."""
    values = load_yaml(path)
    merged = check_values(chart, schema, values)
    objects, notes, out = render(chart, values)
    check_objects(objects, crds, merged, "\n".join(out.values()))
    lint(values)
    return len(objects)


# ---------------------------------------------------------------------------------- mutations


def set_path(obj, path, value):
    parts = []
    for seg in path.split("."):
        m = re.fullmatch(r"([^\[\]]+)((?:\[\d+\])*)", seg)
        if not m:
            raise SystemExit(f"bad path segment {seg!r} in {path!r}")
        parts.append(m.group(1))
        parts += [int(i) for i in re.findall(r"\[(\d+)\]", m.group(2))]
    cur = obj
    for p in parts[:-1]:
        cur = cur[p]
    cur[parts[-1]] = value


def mutation(chart, crds, path):
    """A rendered object with fields set wrong: (objects, refusal or None)."""
    spec = load_yaml(path)
    values = load_yaml(os.path.join(VALUES, spec["values"]))
    objects, _, _ = render(chart, values)
    kind, name = spec["object"].split("/", 1)
    matches = [o for _, o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    if not matches:
        raise SystemExit(f"{rel(path)}: {spec['values']} renders no {spec['object']}")
    obj = copy.deepcopy(matches[0])
    for field, value in spec["set"].items():
        set_path(obj, field, value)
    stage, errs = validate_object(obj, crds)
    expect = spec.get("refusedBy")
    if errs and expect and not stage.startswith(expect):
        return len(objects), None, f"refused by {stage}, expected {expect}"
    if errs:
        return len(objects), Refused(stage, [(f"{obj_name(obj)}: {f}", w) for f, w in errs]), None
    return len(objects), None, None


# ---------------------------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-v", "--verbose", action="store_true", help="every problem, not the first of each file")
    args = ap.parse_args()
    t0 = time.time()
    with open(os.path.join(CHART, "values.schema.json")) as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    crds = crd_schemas()
    for file, s in crds.values():
        jsonschema.Draft7Validator.check_schema(s)
    rows, failures = [], []
    good = sorted(glob.glob(os.path.join(VALUES, "*.yaml")))
    broken = sorted(glob.glob(os.path.join(VALUES, "broken", "*.yaml")))
    mutations = sorted(glob.glob(os.path.join(VALUES, "broken", "rendered", "*.yaml")))
    if not good or not broken or not mutations:
        raise SystemExit("chart-check: no values files, broken values files or rendered mutations found")
    with helm.Chart.load(CHART) as chart:
        for path in good:
            try:
                n = process(chart, schema, crds, path)
                rows.append((rel(path), n, "ok"))
            except Refused as e:
                rows.append((rel(path), e.objects if e.objects is not None else "-", "FAILED: " + e.first()))
                for where, what in e.problems:
                    failures.append(f"FAIL {rel(path)}: {e.stage}: {where}: {what}")
        for path in broken:
            try:
                n = process(chart, schema, crds, path)
                rows.append((rel(path), n, "ACCEPTED (must be refused)"))
                failures.append(f"FAIL {rel(path)}: accepted, but a broken values file must be refused")
            except Refused as e:
                rows.append((rel(path), e.objects if e.objects is not None else "-", "refused: " + e.first()))
                if args.verbose:
                    rows += [("", "", f"  {where}: {what}") for where, what in e.problems[1:]]
        for path in mutations:
            n, refusal, wrong = mutation(chart, crds, path)
            if refusal:
                rows.append((rel(path), n, "refused: " + refusal.first()))
            else:
                why = wrong or "accepted, but the mutated object must be refused"
                rows.append((rel(path), n, "ACCEPTED: " + why))
                failures.append(f"FAIL {rel(path)}: {why}")
    width = max(len(r[0]) for r in rows)
    print(f"{'values file':<{width}}  objects  result")
    for file, n, result in rows:
        print(f"{file:<{width}}  {str(n):>7}  {result}")
    for f in failures:
        print(f, file=sys.stderr)
    print(f"chart-check: {len(good)} values files, {len(broken)} broken values files, "
          f"{len(mutations)} mutated objects; {len(failures)} problems; "
          f"Kubernetes {KUBE} (kubernetes-validate {kv.__version__}), Helm SDK {helm.helm_sdk_version()} "
          f"(helm-python-sdk, libhelm_c {helm.helm_c_version()}), in {time.time() - t0:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
